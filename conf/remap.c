/*
 * conf/remap.c: remap.config, the rules that turn a client's request into an
 * origin request (and an origin's Location back into the client's view).
 *
 * Directives (one table, remap_directives): map, reverse_map, regex_map,
 * redirect, redirect_temporary, each "DIRECTIVE FROM TO [@option...]", plus
 * ".include FILE".  Options are ATS plugin/ACL hooks Cistern does not have
 * yet; a rule with one is an error (ignoring an @action=deny or an auth
 * plugin would open what it restricts).
 *
 * Invariants of a parsed struct conf_remap:
 *  - rules[] is in file order, with included files spliced in where their
 *    .include line stood;
 *  - every URL has a lowercase scheme (http/https), a lowercase host (for
 *    regex_map's from-URL: the pattern, compiled into rule->re as
 *    ^(pattern)$, case-insensitive), a port (explicit or the scheme's
 *    default) and a path starting with '/';
 *  - IPv6 literal hosts keep their brackets ("[::1]"), the form a Host
 *    header carries and a Location header needs;
 *  - rule->file points at a string in files[], owned by the struct.
 *
 * Matching follows ATS: map and regex_map rules win over redirects whatever
 * their order in the file, and within each class the first rule in file
 * order wins.  Path matching is a plain prefix match on the path (the query
 * never takes part), and the remainder of the request path is carried over
 * to the target, with one slash between the two pieces (remap_join()).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* asprintf, strndup */
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "conf/path.h"

#define REMAP_MAX_INCLUDE_DEPTH 8

struct remap_directive {
    const char          *name;
    enum conf_remap_type type;        /* 0 for .include */
};

static const struct remap_directive remap_directives[] = {
    { "map",                CONF_REMAP_MAP },
    { "reverse_map",        CONF_REMAP_REVERSE_MAP },
    { "regex_map",          CONF_REMAP_REGEX_MAP },
    { "redirect",           CONF_REMAP_REDIRECT },
    { "redirect_temporary", CONF_REMAP_REDIRECT_TEMPORARY },
    { ".include",           0 },
};

/* State of one parse, shared by the files it includes. */
struct remap_parse {
    struct conf_remap  *rm;
    const char         *dir;
    struct conf_errors *e;
    const char         *file;         /* current file (a string in rm->files) */
    char               *stack[REMAP_MAX_INCLUDE_DEPTH + 1]; /* real paths */
    int                 depth;
};

static int remap_parse_file(struct remap_parse *ps, const char *file);

/* ---------------------------------------------------------------------
 * URLs
 */
static int
remap_default_port(const char *scheme)
{
    return strcmp(scheme, "https") == 0 ? 443 : 80;
}

static void
remap_url_free(struct conf_url *u)
{
    free(u->scheme);
    free(u->host);
    free(u->path);
    memset(u, 0, sizeof(*u));
}

/* Characters that can never be part of a host name (or a host pattern). */
static int
remap_bad_host_char(unsigned char c)
{
    return c <= ' ' || c >= 0x7f || c == '/' || c == '@' || c == '#'
           || c == '?' || c == '\\';
}

/* The authority of a remap URL, [auth, auth_end): find where the host ends
 * (*host_end) and the port starts (*port_s, NULL without one): an IPv6
 * literal in brackets, or the last ':' (in a regex host, only a ':'
 * followed by digits).  Records an error and returns -1 on bad input. */
static int
remap_url_authority(struct remap_parse *ps, int line, const char *s, int regex,
                    const char *auth, const char *auth_end,
                    const char **host_end, const char **port_s)
{
    *port_s = NULL;
    if (*auth == '[') {
        char  addr[INET6_ADDRSTRLEN + 1];
        struct in6_addr a6;
        const char *rb = memchr(auth, ']', (size_t)(auth_end - auth));

        if (rb == NULL) {
            conf_error(ps->e, ps->file, line,
                       "unterminated IPv6 address in \"%s\"", s);
            return -1;
        }
        size_t alen = (size_t)(rb - auth - 1);

        if (alen < sizeof(addr)) {
            memcpy(addr, auth + 1, alen);
            addr[alen] = '\0';
        }
        if (alen >= sizeof(addr) || inet_pton(AF_INET6, addr, &a6) != 1) {
            conf_error(ps->e, ps->file, line,
                       "bad IPv6 address \"%.*s\" in \"%s\"",
                       (int)(rb - auth + 1), auth, s);
            return -1;
        }
        *host_end = rb + 1;
        if (*host_end < auth_end) {
            if (**host_end != ':') {
                conf_error(ps->e, ps->file, line,
                           "unexpected \"%.*s\" after IPv6 address in \"%s\"",
                           (int)(auth_end - *host_end), *host_end, s);
                return -1;
            }
            *port_s = *host_end + 1;
        }
    } else {
        /* The last ':' separates the port.  A regex pattern may contain a
         * ':' of its own, so there only a ':' followed by digits counts. */
        const char *colon = NULL;

        for (const char *p = auth; p < auth_end; p++)
            if (*p == ':')
                colon = p;
        if (colon != NULL && regex) {
            for (const char *p = colon + 1; p < auth_end; p++)
                if (!isdigit((unsigned char)*p))
                    colon = NULL;
            if (colon != NULL && colon + 1 == auth_end)
                colon = NULL;
        }
        *host_end = colon != NULL ? colon : auth_end;
        if (colon != NULL)
            *port_s = colon + 1;
    }
    return 0;
}

/* The port of a remap URL, [port_s, auth_end), or the scheme's default
 * when port_s is NULL.  Records an error and returns -1 on bad input. */
static int
remap_url_port(struct remap_parse *ps, int line, const char *s, const char *port_s,
               const char *auth_end, struct conf_url *u)
{
    char *end;
    long  port;

    if (port_s != NULL) {
        if (port_s == auth_end) {
            conf_error(ps->e, ps->file, line, "missing port number in \"%s\"",
                       s);
            return -1;
        }
        errno = 0;
        port = strtol(port_s, &end, 10);
        if (!isdigit((unsigned char)*port_s) || end != auth_end) {
            conf_error(ps->e, ps->file, line, "bad port \"%.*s\" in \"%s\"",
                       (int)(auth_end - port_s), port_s, s);
            return -1;
        }
        if (errno == ERANGE || port < 1 || port > 65535) {
            conf_error(ps->e, ps->file, line,
                       "port %.*s is out of range (1..65535) in \"%s\"",
                       (int)(auth_end - port_s), port_s, s);
            return -1;
        }
        u->port = (int)port;
        u->port_explicit = 1;
    } else {
        u->port = remap_default_port(u->scheme);
    }
    return 0;
}

/* Parse "scheme://host[:port][/path]" into u.  regex: the host is a pattern
 * (not validated as a host name).  Records an error and returns -1 on bad
 * input. */
static int
remap_url_parse(struct remap_parse *ps, int line, const char *s, int regex,
                struct conf_url *u)
{
    const char *sep, *auth, *auth_end, *host_end, *port_s;

    memset(u, 0, sizeof(*u));
    sep = strstr(s, "://");
    if (sep == NULL || sep == s) {
        conf_error(ps->e, ps->file, line,
                   "\"%s\" is not a URL (expected scheme://host/path)", s);
        return -1;
    }
    u->scheme = strndup(s, (size_t)(sep - s));
    if (u->scheme == NULL)
        goto oom;
    for (char *p = u->scheme; *p != '\0'; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strcmp(u->scheme, "http") != 0 && strcmp(u->scheme, "https") != 0) {
        conf_error(ps->e, ps->file, line,
                   "unsupported scheme \"%.*s\" in \"%s\" (expected http or "
                   "https)", (int)(sep - s), s, s);
        goto fail;
    }

    auth = sep + 3;
    auth_end = strchr(auth, '/');
    if (auth_end == NULL)
        auth_end = auth + strlen(auth);

    if (remap_url_authority(ps, line, s, regex, auth, auth_end, &host_end, &port_s) < 0)
        goto fail;

    if (host_end == auth) {
        conf_error(ps->e, ps->file, line, "missing host in \"%s\"", s);
        goto fail;
    }
    if (!regex) {
        for (const char *p = auth; p < host_end; p++) {
            if (remap_bad_host_char((unsigned char)*p)
                || (*p == ':' && *auth != '[')) {
                conf_error(ps->e, ps->file, line,
                           "bad character '%c' in host \"%.*s\"", *p,
                           (int)(host_end - auth), auth);
                goto fail;
            }
        }
    }
    u->host = strndup(auth, (size_t)(host_end - auth));
    if (u->host == NULL)
        goto oom;
    /* The pattern keeps its case: REG_ICASE handles it, and lowercasing
     * would turn \S into \s. */
    if (!regex)
        for (char *p = u->host; *p != '\0'; p++)
            *p = (char)tolower((unsigned char)*p);
    u->hostlen = strlen(u->host);

    if (remap_url_port(ps, line, s, port_s, auth_end, u) < 0)
        goto fail;

    u->path = strdup(*auth_end == '\0' ? "/" : auth_end);
    if (u->path == NULL)
        goto oom;
    u->pathlen = strlen(u->path);
    return 0;

oom:
    conf_error(ps->e, ps->file, line, "out of memory");
fail:
    remap_url_free(u);
    return -1;
}

/* Rewrite the percent-encodings of path in place as requests' paths are:
 * unreserved characters decoded, the others' hex digits uppercased.
 * Returns the new length. */
static size_t
remap_pct_normalise(char *path)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i, o = 0;

    for (i = 0; path[i] != '\0'; i++) {
        const char *h1, *h2;

        if (path[i] != '%' || !isxdigit((unsigned char)path[i + 1])
            || !isxdigit((unsigned char)path[i + 2])) {
            path[o++] = path[i];
            continue;
        }
        h1 = strchr(hex, toupper((unsigned char)path[i + 1]));
        h2 = strchr(hex, toupper((unsigned char)path[i + 2]));
        int v = (int)((h1 - hex) * 16 + (h2 - hex));
        if (isalnum(v) || v == '-' || v == '.' || v == '_' || v == '~') {
            path[o++] = (char)v;
        } else {
            path[o++] = '%';
            path[o++] = *h1;
            path[o++] = *h2;
        }
        i += 2;
    }
    path[o] = '\0';
    return o;
}

/* ---------------------------------------------------------------------
 * Parsing
 */
static int
remap_add_rule(struct remap_parse *ps, struct conf_remap_rule *rule)
{
    struct conf_remap *rm = ps->rm;
    struct conf_remap_rule *nr;

    nr = realloc(rm->rules, sizeof(*nr) * (size_t)(rm->nrules + 1));
    if (nr == NULL)
        return -1;
    rm->rules = nr;
    rm->rules[rm->nrules++] = *rule;
    return 0;
}

static void
remap_rule_free(struct conf_remap_rule *rule)
{
    remap_url_free(&rule->from);
    remap_url_free(&rule->to);
    if (rule->re_ok)
        regfree(&rule->re);
    rule->re_ok = 0;
}

static void
remap_include(struct remap_parse *ps, int line, char *p)
{
    const char *saved = ps->file;
    char       *name, *path, *real;

    name = conf_token(&p);
    if (name == NULL) {
        conf_error(ps->e, ps->file, line, ".include: missing file name");
        return;
    }
    if (conf_token(&p) != NULL) {
        conf_error(ps->e, ps->file, line,
                   ".include: too many fields (expected one file name)");
        return;
    }
    if (ps->depth > REMAP_MAX_INCLUDE_DEPTH) {
        conf_error(ps->e, ps->file, line,
                   ".include \"%s\": includes nested deeper than %d", name,
                   REMAP_MAX_INCLUDE_DEPTH);
        return;
    }
    path = conf_path(ps->dir, name);
    if (path == NULL) {
        conf_error(ps->e, ps->file, line, "out of memory");
        return;
    }
    real = realpath(path, NULL);
    if (real == NULL) {
        conf_error(ps->e, ps->file, line, ".include \"%s\": %s", name,
                   strerror(errno));
        free(path);
        return;
    }
    for (int i = 0; i < ps->depth; i++) {
        if (ps->stack[i] != NULL && strcmp(ps->stack[i], real) == 0) {
            conf_error(ps->e, ps->file, line,
                       ".include \"%s\": include loop (the file is already "
                       "being read)", name);
            free(real);
            free(path);
            return;
        }
    }
    free(real);
    remap_parse_file(ps, path);
    free(path);
    ps->file = saved;
}

static int
remap_line(void *arg, char *line, int lineno)
{
    struct remap_parse *ps = arg;
    const struct remap_directive *d = NULL;
    struct conf_remap_rule rule;
    char *p = line, *word, *from, *to, *opt;
    int   rc;

    word = conf_token(&p);
    for (size_t i = 0; i < sizeof(remap_directives) / sizeof(remap_directives[0]); i++)
        if (strcasecmp(word, remap_directives[i].name) == 0)
            d = &remap_directives[i];
    if (d == NULL) {
        conf_error(ps->e, ps->file, lineno, "unknown directive \"%s\"", word);
        return 0;
    }
    if (d->type == 0) {
        remap_include(ps, lineno, p);
        return 0;
    }

    from = conf_token(&p);
    to = from != NULL ? conf_token(&p) : NULL;
    if (to == NULL || to[0] == '#') {
        conf_error(ps->e, ps->file, lineno,
                   "%s: too few fields (expected %s FROM TO)", d->name,
                   d->name);
        return 0;
    }
    while ((opt = conf_token(&p)) != NULL) {
        if (opt[0] == '#')
            break;
        if (opt[0] != '@') {
            conf_error(ps->e, ps->file, lineno,
                       "%s: too many fields (unexpected \"%s\")", d->name,
                       opt);
            return 0;
        }
        /* @action=deny, @src_ip=, @method=, @plugin= (an auth plugin):
         * ignoring one would load a rule meant to restrict access as an
         * unrestricted one.  Fail closed until they are implemented. */
        conf_error(ps->e, ps->file, lineno,
                   "%s: option \"%s\" is not supported (ignoring it could "
                   "open what the rule restricts)", d->name, opt);
        return 0;
    }

    memset(&rule, 0, sizeof(rule));
    rule.type = d->type;
    rule.file = ps->file;
    rule.line = lineno;
    if (remap_url_parse(ps, lineno, from, d->type == CONF_REMAP_REGEX_MAP,
                        &rule.from) < 0
        || remap_url_parse(ps, lineno, to, 0, &rule.to) < 0) {
        remap_rule_free(&rule);
        return 0;
    }

    /* Requests are matched on their normalised path (worker/http.h,
     * http_path_normalize): a from-path must be written the same way or
     * "/%7Euser/" would never match. */
    if (d->type != CONF_REMAP_REVERSE_MAP)
        rule.from.pathlen = remap_pct_normalise(rule.from.path);

    if (d->type == CONF_REMAP_REGEX_MAP) {
        char *pat;

        if (asprintf(&pat, "^(%s)$", rule.from.host) < 0) {
            conf_error(ps->e, ps->file, lineno, "out of memory");
            remap_rule_free(&rule);
            return 0;
        }
        rc = regcomp(&rule.re, pat, REG_EXTENDED | REG_ICASE);
        free(pat);
        if (rc != 0) {
            char why[128];

            regerror(rc, &rule.re, why, sizeof(why));
            conf_error(ps->e, ps->file, lineno,
                       "regex_map: invalid regular expression \"%s\": %s",
                       rule.from.host, why);
            remap_rule_free(&rule);
            return 0;
        }
        rule.re_ok = 1;
    }

    if (remap_add_rule(ps, &rule) < 0) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        remap_rule_free(&rule);
    }
    return 0;
}

/* Read one file (the top one or an include) into ps->rm. */
static int
remap_parse_file(struct remap_parse *ps, const char *file)
{
    struct conf_remap *rm = ps->rm;
    char **nf, *name;
    int    rc;

    nf = realloc(rm->files, sizeof(*nf) * (size_t)(rm->nfiles + 1));
    if (nf == NULL)
        goto oom;
    rm->files = nf;
    name = strdup(file);
    if (name == NULL)
        goto oom;
    rm->files[rm->nfiles++] = name;

    /* A file we cannot resolve cannot be part of a loop we could detect;
     * fopen() below will report why. */
    ps->stack[ps->depth++] = realpath(file, NULL);
    ps->file = name;
    rc = conf_foreach_line(file, ps->e, remap_line, ps);
    free(ps->stack[--ps->depth]);
    ps->stack[ps->depth] = NULL;
    return rc;

oom:
    conf_error(ps->e, file, 0, "out of memory");
    return -1;
}

int
conf_remap_parse(struct conf_remap *rm, const char *file, const char *dir,
                 struct conf_errors *e)
{
    struct remap_parse ps;
    int                n0 = e->n;

    memset(&ps, 0, sizeof(ps));
    ps.rm = rm;
    ps.dir = dir;
    ps.e = e;
    if (remap_parse_file(&ps, file) < 0)
        return -1;
    return e->n == n0 ? 0 : -1;
}

void
conf_remap_free(struct conf_remap *rm)
{
    for (int i = 0; i < rm->nrules; i++)
        remap_rule_free(&rm->rules[i]);
    free(rm->rules);
    for (int i = 0; i < rm->nfiles; i++)
        free(rm->files[i]);
    free(rm->files);
    memset(rm, 0, sizeof(*rm));
}

/* ---------------------------------------------------------------------
 * Matching and rewriting
 */

/* Append base + rest into out[*len..], putting exactly one '/' between a
 * base and a rest that are both path segments: "/" + "/a" -> "/a", "/bar"
 * + "a" -> "/bar/a" when the matched prefix ended at a '/' (ATS inserts that
 * slash too), "/bar" + "?q" -> "/bar?q".  Returns -1 when out is too small
 * (the terminating NUL included). */
static int
remap_join(char *out, size_t outsz, size_t *len, const char *base,
           size_t baselen, int matched_slash, const char *rest,
           size_t restlen)
{
    int slash = 0;

    if (baselen > 0 && base[baselen - 1] == '/' && restlen > 0
        && rest[0] == '/') {
        rest++;
        restlen--;
    } else if (matched_slash && restlen > 0 && rest[0] != '/'
               && rest[0] != '?' && (baselen == 0 || base[baselen - 1] != '/')) {
        slash = 1;
    }
    if (*len + baselen + (size_t)slash + restlen + 1 > outsz)
        return -1;
    memcpy(out + *len, base, baselen);
    *len += baselen;
    if (slash)
        out[(*len)++] = '/';
    memcpy(out + *len, rest, restlen);
    *len += restlen;
    out[*len] = '\0';
    return 0;
}

/* Is the segment of path[0..len) around position at (the query aside) a
 * dot segment?  A normalised request path has none, but a from-path that
 * does not end in '/' glues the rest of the request path to the to-path's
 * last segment: "map http://a/p http://o/q/" maps "/p.." to "/q/..", which
 * an origin resolves outside /q/. */
static int
remap_dots_at(const char *path, size_t len, size_t at)
{
    size_t s = at, e = at;

    while (s > 0 && path[s - 1] != '/')
        s--;
    while (e < len && path[e] != '/' && path[e] != '?')
        e++;
    /* Each piece of the segment too, cut where an origin may cut it, as
     * the request checker does for a whole segment: "/p..;x" gave
     * "/q/..;x". */
    int pieces;
    return conf_path_dot_piece(path + s, e - s, &pieces);
}

/* Substitute $0..$9 in tmpl from the match groups of subject. */
static int
remap_subst(char *out, size_t outsz, const char *tmpl, const char *subject,
            const regmatch_t *m, size_t nm)
{
    size_t n = 0;

    for (const char *p = tmpl; *p != '\0'; p++) {
        if (p[0] == '$' && isdigit((unsigned char)p[1])) {
            size_t g = (size_t)(p[1] - '0');

            /* Group 1 of the compiled pattern is our own ^( )$ wrapper, so
             * the operator's $0 is group 1 and $N is group N+1. */
            g++;
            p++;
            if (g < nm && m[g].rm_so >= 0) {
                size_t l = (size_t)(m[g].rm_eo - m[g].rm_so);

                if (n + l >= outsz)
                    return -1;
                memcpy(out + n, subject + m[g].rm_so, l);
                n += l;
            }
            continue;
        }
        if (n + 1 >= outsz)
            return -1;
        out[n++] = *p;
    }
    out[n] = '\0';
    return 0;
}

static int
remap_host_matches(const struct conf_remap_rule *r, const char *host,
                   size_t hostlen, const char *lchost, regmatch_t *m,
                   size_t nm)
{
    if (r->type == CONF_REMAP_REGEX_MAP)
        return lchost != NULL && r->re_ok
               && regexec(&r->re, lchost, nm, m, 0) == 0;
    return hostlen == r->from.hostlen
           && strncasecmp(host, r->from.host, hostlen) == 0;
}

static int
remap_path_matches(const struct conf_url *u, const char *path, size_t pathlen)
{
    return pathlen >= u->pathlen && memcmp(path, u->path, u->pathlen) == 0;
}

const struct conf_remap_rule *
conf_remap_find(const struct conf_remap *rm, const char *scheme,
                const char *host, size_t hostlen, int port,
                const char *path, size_t pathlen,
                struct conf_remap_result *res)
{
    char        lchost[256];
    const char *lc = NULL;
    regmatch_t  m[11];
    int         pass;

    /* regexec() wants a NUL-terminated string; a host that does not fit a
     * DNS name cannot match a regex_map rule anyway. */
    if (hostlen < sizeof(lchost) && memchr(host, '\0', hostlen) == NULL) {
        for (size_t i = 0; i < hostlen; i++)
            lchost[i] = (char)tolower((unsigned char)host[i]);
        lchost[hostlen] = '\0';
        lc = lchost;
    }

    for (pass = 0; pass < 2; pass++) {
        for (int i = 0; i < rm->nrules; i++) {
            const struct conf_remap_rule *r = &rm->rules[i];
            int is_map = r->type == CONF_REMAP_MAP
                         || r->type == CONF_REMAP_REGEX_MAP;
            int is_redirect = r->type == CONF_REMAP_REDIRECT
                              || r->type == CONF_REMAP_REDIRECT_TEMPORARY;
            size_t len = 0;

            if (pass == 0 ? !is_map : !is_redirect)
                continue;
            if (strcasecmp(scheme, r->from.scheme) != 0
                || port != r->from.port
                || !remap_path_matches(&r->from, path, pathlen)
                || !remap_host_matches(r, host, hostlen, lc, m, 11))
                continue;

            memset(res, 0, offsetof(struct conf_remap_result, path));
            res->rule = r;
            /* "http" or "https" (checked at load): no formatting needed */
            size_t slen = strnlen(r->to.scheme, sizeof(res->scheme) - 1);
            memcpy(res->scheme, r->to.scheme, slen);
            res->scheme[slen] = '\0';
            res->port = r->to.port;
            if (r->type == CONF_REMAP_REGEX_MAP) {
                if (remap_subst(res->host, sizeof(res->host), r->to.host, lc,
                                m, 11) < 0)
                    return NULL;
            } else {
                if (r->to.hostlen >= sizeof(res->host))
                    return NULL;
                memcpy(res->host, r->to.host, r->to.hostlen + 1);
            }
            if (remap_join(res->path, sizeof(res->path), &len, r->to.path,
                           r->to.pathlen,
                           r->from.path[r->from.pathlen - 1] == '/',
                           path + r->from.pathlen,
                           pathlen - r->from.pathlen) < 0
                || (r->from.path[r->from.pathlen - 1] != '/'
                    && remap_dots_at(res->path, len, r->to.pathlen)))
                return NULL;
            res->pathlen = len;
            return r;
        }
    }
    return NULL;
}

/* Does url (scheme://authority/path...) point under u?  On success *rest is
 * what follows u's path in url. */
static int
remap_url_under(const struct conf_url *u, const char *url, size_t urllen,
                const char **rest)
{
    const char *sep, *auth, *end = url + urllen, *hend, *path;
    size_t      slen;
    int         port;

    sep = memmem(url, urllen, "://", 3);
    if (sep == NULL)
        return 0;
    slen = (size_t)(sep - url);
    if (slen != strlen(u->scheme) || strncasecmp(url, u->scheme, slen) != 0)
        return 0;
    auth = sep + 3;
    path = auth;
    while (path < end && *path != '/' && *path != '?' && *path != '#')
        path++;
    if (*auth == '[') {
        hend = memchr(auth, ']', (size_t)(path - auth));
        if (hend == NULL)
            return 0;
        hend++;
    } else {
        hend = memchr(auth, ':', (size_t)(path - auth));
        if (hend == NULL)
            hend = path;
    }
    if ((size_t)(hend - auth) != u->hostlen
        || strncasecmp(auth, u->host, u->hostlen) != 0)
        return 0;
    if (hend < path) {
        char *pend;
        long  p;

        if (*hend != ':' || hend + 1 == path)
            return 0;
        p = strtol(hend + 1, &pend, 10);
        if (pend != path || p < 1 || p > 65535)
            return 0;
        port = (int)p;
    } else {
        port = remap_default_port(u->scheme);
    }
    if (port != u->port)
        return 0;
    /* "http://h" and "http://h?x" have the path "/". */
    if (path == end || *path != '/') {
        if (u->pathlen != 1)
            return 0;
        *rest = path;
        return 1;
    }
    if ((size_t)(end - path) < u->pathlen
        || memcmp(path, u->path, u->pathlen) != 0)
        return 0;
    *rest = path + u->pathlen;
    return 1;
}

/* Rewrite url when it lies under `origin`, giving the same place under
 * `client`.  Returns 1 when rewritten, 0 when url is not under origin, -1
 * when out is too small. */
static int
remap_reverse_one(const struct conf_url *origin, const struct conf_url *client,
                  const char *url, size_t urllen, char *out, size_t outlen)
{
    const char *rest;
    size_t      len;
    int         n;

    if (!remap_url_under(origin, url, urllen, &rest))
        return 0;
    if (client->port_explicit)
        n = snprintf(out, outlen, "%s://%s:%d", client->scheme, client->host,
                     client->port);
    else
        n = snprintf(out, outlen, "%s://%s", client->scheme, client->host);
    if (n < 0 || (size_t)n >= outlen)
        return -1;
    len = (size_t)n;
    if (remap_join(out, outlen, &len, client->path, client->pathlen,
                   origin->path[origin->pathlen - 1] == '/', rest,
                   (size_t)(url + urllen - rest)) < 0)
        return -1;
    return 1;
}

int
conf_remap_reverse(const struct conf_remap *rm, const char *url,
                   size_t urllen, char *out, size_t outlen)
{
    int rc;

    /* Explicit reverse_map rules first: they exist precisely to say how
     * responses should be rewritten.  As in ATS, a reverse_map rule reads
     * "reverse_map ORIGIN-URL CLIENT-URL", the mirror of a map rule. */
    for (int i = 0; i < rm->nrules; i++) {
        const struct conf_remap_rule *r = &rm->rules[i];

        if (r->type != CONF_REMAP_REVERSE_MAP)
            continue;
        rc = remap_reverse_one(&r->from, &r->to, url, urllen, out, outlen);
        if (rc != 0)
            return rc > 0;
    }
    for (int i = 0; i < rm->nrules; i++) {
        const struct conf_remap_rule *r = &rm->rules[i];

        if (r->type != CONF_REMAP_MAP)
            continue;
        rc = remap_reverse_one(&r->to, &r->from, url, urllen, out, outlen);
        if (rc != 0)
            return rc > 0;
    }
    return 0;
}
