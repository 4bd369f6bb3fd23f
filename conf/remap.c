/*
 * conf/remap.c: remap.config, the rules that turn a client's request into an
 * origin request (and an origin's Location back into the client's view).
 *
 * Directives (one table, remap_directives): map, reverse_map, regex_map,
 * redirect, redirect_temporary, regex_redirect(_temporary),
 * (regex_)map_with_recv_port, each "DIRECTIVE FROM TO [@option...]", plus
 * ".include PATH..." (files, and directories: their files in alphasort
 * order, as ATS) and the named-filter directives (.definefilter,
 * .activatefilter, .deactivatefilter, .deletefilter).  Options are ATS's ACL
 * filter (@action=, @src_ip=, @in_ip=, @method=, @internal) and the
 * plugins (@plugin= with its @pparam=s: conf/plugin.c); any other
 * (@strategy=, unknown ones) is an error, as is map_with_referer:
 * ignoring one would load a rule that restricts or routes as one that
 * does not.
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
 * Matching follows ATS: map_with_recv_port rules first, then map and
 * regex_map, then redirect and redirect_temporary, then the regex
 * redirects, whatever their order in the file, and within each class the
 * first rule in file order wins.  A matched rule's ACL filters
 * (rule->acl: its in-line filter, then the named filters active at its
 * line in activation order) are checked by conf_remap_acl_allows().  Path matching is a plain prefix match on the path (the query
 * never takes part), and the remainder of the request path is carried over
 * to the target, with one slash between the two pieces (remap_join()).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* asprintf, strndup */
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "conf/path.h"

#define REMAP_MAX_INCLUDE_DEPTH 8
#define REMAP_NAME_MAX 64       /* @name=: the metrics' rule label */

/* What a line's first word is. */
enum remap_word {
    REMAP_RULE = 1,                   /* a rule: type says which */
    REMAP_INCLUDE,
    REMAP_DEFINE,                     /* .definefilter NAME @opt... */
    REMAP_DELETE,                     /* .deletefilter NAME */
    REMAP_ACTIVATE,                   /* .activatefilter NAME */
    REMAP_DEACTIVATE,                 /* .deactivatefilter NAME */
    REMAP_UNSUPPORTED,                /* known to ATS, not to us: an error */
};

struct remap_directive {
    const char          *name;
    enum remap_word      word;
    enum conf_remap_type type;        /* REMAP_RULE only */
    int                  regex;       /* the from-host is a pattern */
};

/* ATS's rule types and directives, with its older spellings of the
 * filter directives. */
static const struct remap_directive remap_directives[] = {
    { "map",                        REMAP_RULE, CONF_REMAP_MAP, 0 },
    { "reverse_map",                REMAP_RULE, CONF_REMAP_REVERSE_MAP, 0 },
    { "regex_map",                  REMAP_RULE, CONF_REMAP_REGEX_MAP, 1 },
    { "redirect",                   REMAP_RULE, CONF_REMAP_REDIRECT, 0 },
    { "redirect_temporary",         REMAP_RULE, CONF_REMAP_REDIRECT_TEMPORARY, 0 },
    { "map_with_recv_port",         REMAP_RULE, CONF_REMAP_MAP_RECV_PORT, 0 },
    { "regex_map_with_recv_port",   REMAP_RULE, CONF_REMAP_MAP_RECV_PORT, 1 },
    { "regex_redirect",             REMAP_RULE, CONF_REMAP_REGEX_REDIRECT, 1 },
    { "regex_redirect_temporary",   REMAP_RULE, CONF_REMAP_REGEX_REDIRECT_TEMPORARY, 1 },
    { "map_with_referer",           REMAP_UNSUPPORTED, 0, 0 },
    { "regex_map_with_referer",     REMAP_UNSUPPORTED, 0, 0 },
    { ".include",                   REMAP_INCLUDE, 0, 0 },
    { ".definefilter",              REMAP_DEFINE, 0, 0 },
    { ".deffilter",                 REMAP_DEFINE, 0, 0 },
    { ".defflt",                    REMAP_DEFINE, 0, 0 },
    { ".deletefilter",              REMAP_DELETE, 0, 0 },
    { ".delfilter",                 REMAP_DELETE, 0, 0 },
    { ".delflt",                    REMAP_DELETE, 0, 0 },
    { ".activatefilter",            REMAP_ACTIVATE, 0, 0 },
    { ".activefilter",              REMAP_ACTIVATE, 0, 0 },
    { ".usefilter",                 REMAP_ACTIVATE, 0, 0 },
    { ".useflt",                    REMAP_ACTIVATE, 0, 0 },
    { ".deactivatefilter",          REMAP_DEACTIVATE, 0, 0 },
    { ".unactivefilter",            REMAP_DEACTIVATE, 0, 0 },
    { ".unusefilter",               REMAP_DEACTIVATE, 0, 0 },
    { ".deuseflt",                  REMAP_DEACTIVATE, 0, 0 },
    { ".unuseflt",                  REMAP_DEACTIVATE, 0, 0 },
};

/* A named filter while the file is read: its options as written (ATS
 * keeps them so and builds each rule's copy from them; a second
 * .definefilter of the same name adds to them). */
struct remap_filter {
    char    *name;
    char   **argv;                    /* "@action=deny", ... */
    int      argc;
    int      active;                  /* activation order (1, 2, ...); 0: not active */
};

/* State of one parse, shared by the files it includes. */
struct remap_parse {
    struct conf_remap  *rm;
    const char         *dir;
    struct conf_errors *e;
    const char         *file;         /* current file (a string in rm->files) */
    char               *stack[REMAP_MAX_INCLUDE_DEPTH + 1]; /* real paths */
    int                 depth;
    struct remap_filter *filters;     /* named filters, global across includes */
    int                 nfilters;
    int                 activations;  /* the last activation's number */
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
 * literal in brackets (not in a regex host), or the last ':' (in a regex
 * host, only a ':' followed by digits).  Records an error and returns -1 on bad input. */
static int
remap_url_authority(struct remap_parse *ps, int line, const char *s, int regex,
                    const char *auth, const char *auth_end,
                    const char **host_end, const char **port_s)
{
    *port_s = NULL;
    /* In a pattern '[' opens a bracket expression ("[a-z]+"): there an
     * IPv6 literal would be written "\[::1\]" anyway. */
    if (*auth == '[' && !regex) {
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
    if (!regex && *auth == '{') {
        conf_error(ps->e, ps->file, line, "\"%.*s\": ATS's internal pages "
                   "({cache}, {stat}, {hostdb}, ...) are not supported",
                   (int)(host_end - auth), auth);
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
 * ACL filters (@action=, @src_ip=, @in_ip=, @method=, @internal)
 */
static void
remap_acl_free(struct conf_acl *a)
{
    for (int i = 0; i < a->nsrc; i++)
        free(a->src[i].ranges);
    for (int i = 0; i < a->nin; i++)
        free(a->in[i].ranges);
    for (int i = 0; i < a->nmnames; i++)
        free(a->mnames[i]);
    free(a->mnames);
    free(a->src);
    free(a->in);
    memset(a, 0, sizeof(*a));
}

/* "@src_ip=RANGE" / "@src_ip=~RANGE" (and @in_ip): one address, a-b or a
 * CIDR block, or "all".  Returns 0, or -1 with *why. */
static int
remap_acl_ip(struct conf_acl_ip **list, int *n, const char *v, const char **why)
{
    struct conf_ip_allow tmp;
    struct conf_acl_ip  *nl, *ip;
    int invert = 0;

    if (*v == '~') {
        invert = 1;
        v++;
    }
    if (*v == '\0') {
        *why = "no address";
        return -1;
    }
    /* One range per option, as in ATS: a list would read as one. */
    if (strpbrk(v, ", \t") != NULL) {
        *why = "one address or range per option (repeat the option)";
        return -1;
    }
    memset(&tmp, 0, sizeof(tmp));
    if (strcasecmp(v, "all") == 0)
        v = "0.0.0.0/0 ::/0";
    if (conf_ip_list_parse(&tmp, v, why) < 0) {
        conf_ip_allow_free(&tmp);
        return -1;
    }
    nl = realloc(*list, sizeof(*nl) * (size_t)(*n + 1));
    if (nl == NULL) {
        conf_ip_allow_free(&tmp);
        *why = "out of memory";
        return -1;
    }
    *list = nl;
    ip = &nl[(*n)++];
    ip->ranges = malloc(sizeof(*ip->ranges) * (size_t)tmp.nrules);
    ip->nranges = 0;
    ip->invert = invert;
    if (ip->ranges == NULL) {
        conf_ip_allow_free(&tmp);
        *why = "out of memory";
        return -1;
    }
    for (int i = 0; i < tmp.nrules; i++)
        ip->ranges[ip->nranges++] = tmp.rules[i].range;
    conf_ip_allow_free(&tmp);
    return 0;
}

/* The options ATS takes on a rule that Cistern does not implement, and
 * why each is refused rather than ignored. */
static const struct {
    const char *prefix;
    const char *why;
} remap_unsupported_opts[] = {
    { "strategy=",        "next-hop strategies (strategies.yaml) are not supported; "
                          "this rule would go to its origin directly" },
    { "volume=",          "cache volumes are not supported" },
    { "src_ip_category=", "IP categories (ATS 10) are not supported; this filter "
                          "would match other addresses" },
    { "mapid=",           "map ids (for plugins) are not supported" },
};

/* Parse filter options (each "@name[=value]") into *a, which starts
 * zeroed.  Reports errors (file:line) when report is set.  Returns 0, or
 * -1 after an error. */
static int
remap_acl_parse(struct remap_parse *ps, int line, int report, char **argv,
                int argc, struct conf_acl *a)
{
    int action_seen = 0, bad = 0;

#define ACL_ERR(...) do { if (report) conf_error(ps->e, ps->file, line, __VA_ARGS__); \
                          bad = 1; } while (0)
    a->allow = 1;                     /* ATS's default action */
    a->action = CONF_ACL_ALLOW;
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i] + 1, *v = strchr(o, '='), *why;
        size_t nl = v != NULL ? (size_t)(v - o) : strlen(o);
        int known = 0;

        if (v != NULL)
            v++;
#define OPT(n) (nl == sizeof(n) - 1 && strncasecmp(o, n, nl) == 0)
        for (size_t k = 0; k < sizeof(remap_unsupported_opts) / sizeof(remap_unsupported_opts[0]); k++) {
            const char *pf = remap_unsupported_opts[k].prefix;
            if (v != NULL && (size_t)(v - o) == strlen(pf) && strncasecmp(o, pf, strlen(pf)) == 0) {
                known = 1;
                ACL_ERR("%s: %s", argv[i], remap_unsupported_opts[k].why);
                break;
            }
        }
        if (known)
            continue;
        if (OPT("internal") && v == NULL) {
            a->internal = 1;
            continue;
        }
        if (v == NULL || !(OPT("action") || OPT("method") || OPT("src_ip") || OPT("in_ip"))) {
            ACL_ERR("unknown option \"%s\"", argv[i]);
            continue;
        }
        if (*v == '\0') {
            ACL_ERR("empty value in \"%s\"", argv[i]);
            continue;
        }
        if (OPT("action")) {
            static const struct { const char *name; enum conf_acl_action act; int legacy; } acts[] = {
                { "allow", CONF_ACL_ALLOW, 1 },  { "deny", CONF_ACL_DENY, 1 },
                { "1", CONF_ACL_SET_ALLOW, 0 },  { "on", CONF_ACL_SET_ALLOW, 0 },
                { "enable", CONF_ACL_SET_ALLOW, 0 },
                { "0", CONF_ACL_SET_DENY, 0 },   { "off", CONF_ACL_SET_DENY, 0 },
                { "disable", CONF_ACL_SET_DENY, 0 },
                { "add_allow", CONF_ACL_ADD_ALLOW, 0 }, { "add_deny", CONF_ACL_ADD_DENY, 0 },
                { "set_allow", CONF_ACL_SET_ALLOW, 0 }, { "set_deny", CONF_ACL_SET_DENY, 0 },
            };
            size_t k, nacts = sizeof(acts) / sizeof(acts[0]);

            if (action_seen++) {
                ACL_ERR("only one @action= per filter (\"%s\")", argv[i]);
                continue;
            }
            for (k = 0; k < nacts; k++)
                if (strcasecmp(v, acts[k].name) == 0)
                    break;
            if (k == nacts) {
                ACL_ERR("unknown action in \"%s\" (expected allow, deny, add_allow, "
                        "add_deny, set_allow or set_deny)", argv[i]);
                continue;
            }
            if (acts[k].legacy && ps->rm->acl_policy == CONF_ACL_MODERN) {
                ACL_ERR("\"%s\": allow and deny are not valid with "
                        "proxy.config.url_remap.acl_behavior_policy 1; use add_%s or set_%s",
                        argv[i], v, v);
                continue;
            }
            a->action = acts[k].act;
            a->allow = a->action == CONF_ACL_ALLOW || a->action == CONF_ACL_ADD_ALLOW
                       || a->action == CONF_ACL_SET_ALLOW;
        } else if (OPT("method")) {
            /* One method per option, any case.  A method without a bit
             * of its own (PROPFIND, MKCOL, ...: the parser takes them) is
             * CONF_METHOD_OTHER and its name is kept: ATS matches such a
             * method by name, and the bit alone would match them all. */
            unsigned b = conf_method_bit(v, strlen(v));
            char   **nn;

            if (strcasecmp(v, "ALL") == 0) {
                ACL_ERR("\"%s\": a filter has no ALL (ip_allow's word; ATS reads "
                        "a method named ALL, which no request carries): leave "
                        "@method= out to match every method", argv[i]);
                continue;
            }
            if (!conf_method_name_ok(v, strlen(v))) {
                ACL_ERR("\"%s\": not a method name, so no request would match "
                        "(one method per @method=; repeat the option)", argv[i]);
                continue;
            }
            a->methods |= b;
            if (b == CONF_METHOD_OTHER) {
                nn = realloc(a->mnames, sizeof(*nn) * (size_t)(a->nmnames + 1));
                if (nn == NULL || (nn[a->nmnames] = strdup(v)) == NULL) {
                    if (nn != NULL)
                        a->mnames = nn;
                    ACL_ERR("out of memory");
                    continue;
                }
                a->mnames = nn;
                a->nmnames++;
            }
        } else if (OPT("src_ip")) {
            if (remap_acl_ip(&a->src, &a->nsrc, v, &why) < 0)
                ACL_ERR("\"%s\": %s", argv[i], why);
        } else {
            if (remap_acl_ip(&a->in, &a->nin, v, &why) < 0)
                ACL_ERR("\"%s\": %s", argv[i], why);
        }
#undef OPT
    }
#undef ACL_ERR
    if (bad)
        remap_acl_free(a);
    return bad ? -1 : 0;
}

static struct remap_filter *
remap_filter_find(struct remap_parse *ps, const char *name)
{
    for (int i = 0; i < ps->nfilters; i++)
        if (strcmp(ps->filters[i].name, name) == 0)
            return &ps->filters[i];
    return NULL;
}

static void
remap_filter_free(struct remap_filter *f)
{
    for (int i = 0; i < f->argc; i++)
        free(f->argv[i]);
    free(f->argv);
    free(f->name);
}

/* The name as a string struct conf_remap owns (one copy per name). */
static const char *
remap_name(struct conf_remap *rm, const char *name)
{
    char **nn;

    for (int i = 0; i < rm->nnames; i++)
        if (strcmp(rm->names[i], name) == 0)
            return rm->names[i];
    nn = realloc(rm->names, sizeof(*nn) * (size_t)(rm->nnames + 1));
    if (nn == NULL)
        return NULL;
    rm->names = nn;
    if ((nn[rm->nnames] = strdup(name)) == NULL)
        return NULL;
    return nn[rm->nnames++];
}

/* @name=NAME (issue 25): the rule's name in metrics (the "rule" label),
 * taken out of opts into rule->name.  Returns 0, or -1 after an error. */
static int
remap_opt_name(struct remap_parse *ps, int lineno, const char *word, char **opts,
               int *nopts, struct conf_remap_rule *rule)
{
    int k = 0;

    for (int i = 0; i < *nopts; i++) {
        const char *v = opts[i] + 6;
        size_t n = strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:");
        if (strncasecmp(opts[i], "@name=", 6) != 0) {
            opts[k++] = opts[i];
            continue;
        }
        if (rule->name != NULL) {
            conf_error(ps->e, ps->file, lineno, "%s: %s: only one @name= per rule", word, opts[i]);
            return -1;
        }
        if (*v == '\0' || v[n] != '\0' || n > REMAP_NAME_MAX) {
            conf_error(ps->e, ps->file, lineno, "%s: \"%s\": a rule's name is 1 to 64 letters, "
                       "digits, '_', '-', '.' or ':'", word, opts[i]);
            return -1;
        }
        if ((rule->name = remap_name(ps->rm, v)) == NULL) {
            conf_error(ps->e, ps->file, lineno, "out of memory");
            return -1;
        }
    }
    *nopts = k;
    return 0;
}

/* .definefilter / .deletefilter / .activatefilter / .deactivatefilter */
static void
remap_filter_directive(struct remap_parse *ps, int line, const char *word,
                       enum remap_word what, char *p)
{
    char *name = conf_token(&p), *opt, **args = NULL;
    struct remap_filter *f;
    int nargs = 0;

    if (name == NULL || name[0] == '@' || name[0] == '#') {
        conf_error(ps->e, ps->file, line, "%s: missing filter name", word);
        return;
    }
    while ((opt = conf_token(&p)) != NULL && opt[0] != '#') {
        char **na;

        if (opt[0] != '@' || what != REMAP_DEFINE) {
            conf_error(ps->e, ps->file, line, "%s %s: unexpected \"%s\"", word, name, opt);
            free(args);
            return;
        }
        if ((na = realloc(args, sizeof(*na) * (size_t)(nargs + 1))) == NULL) {
            conf_error(ps->e, ps->file, line, "out of memory");
            free(args);
            return;
        }
        args = na;
        args[nargs++] = opt;
    }
    f = remap_filter_find(ps, name);

    if (strcmp(name, "ip_allow") == 0 && what != REMAP_DEFINE && what != REMAP_DELETE) {
        /* ATS's implicit filter: ip_allow.config applies to every request
         * here (it is checked before routing), so activating it asks for
         * what Cistern does, and deactivating it cannot be done. */
        if (what == REMAP_ACTIVATE)
            conf_note(ps->e, CONF_NOTE_MATCHES, ps->file, line,
                      "%s ip_allow: ip_allow.config applies to every rule", word);
        else
            conf_error(ps->e, ps->file, line,
                       "%s ip_allow: lifting ip_allow.config for some rules is not "
                       "supported (Cistern checks it before any rule is chosen)", word);
        free(args);
        return;
    }

    switch (what) {
    case REMAP_DEFINE: {
        struct conf_acl test;
        char **na;

        if (nargs == 0) {
            conf_error(ps->e, ps->file, line, "%s %s: no filter options", word, name);
            break;
        }
        if (f == NULL) {
            struct remap_filter *nf = realloc(ps->filters, sizeof(*nf) * (size_t)(ps->nfilters + 1));
            if (nf == NULL) {
                conf_error(ps->e, ps->file, line, "out of memory");
                break;
            }
            ps->filters = nf;
            f = &nf[ps->nfilters];
            memset(f, 0, sizeof(*f));
            if ((f->name = strdup(name)) == NULL) {
                conf_error(ps->e, ps->file, line, "out of memory");
                break;
            }
            ps->nfilters++;
        }
        /* As in ATS, a second definition adds to the first. */
        na = realloc(f->argv, sizeof(*na) * (size_t)(f->argc + nargs));
        if (na == NULL) {
            conf_error(ps->e, ps->file, line, "out of memory");
            break;
        }
        f->argv = na;
        for (int i = 0; i < nargs; i++)
            if ((f->argv[f->argc] = strdup(args[i])) != NULL)
                f->argc++;
        memset(&test, 0, sizeof(test));
        /* errors are reported here, once (and fail the load) */
        if (remap_acl_parse(ps, line, 1, f->argv, f->argc, &test) == 0)
            remap_acl_free(&test);
        break;
    }
    case REMAP_DELETE:
        if (f != NULL) {
            remap_filter_free(f);
            *f = ps->filters[--ps->nfilters];
        }
        break;
    case REMAP_ACTIVATE:
        if (f == NULL)
            conf_error(ps->e, ps->file, line, "%s: undefined filter \"%s\"", word, name);
        else if (!f->active)
            f->active = ++ps->activations;
        break;
    case REMAP_DEACTIVATE:
        if (f == NULL)
            conf_error(ps->e, ps->file, line, "%s: undefined filter \"%s\"", word, name);
        else
            f->active = 0;
        break;
    default:
        break;
    }
    free(args);
}

/* The rule's filters: its in-line one (argv: its @options), then the
 * named filters active now, in activation order.  Returns 0, or -1 after
 * an error. */
static int
remap_rule_acls(struct remap_parse *ps, int line, char **argv, int argc,
                struct conf_remap_rule *rule)
{
    int nactive = 0, last = 0;

    for (int i = 0; i < ps->nfilters; i++)
        nactive += ps->filters[i].active != 0;
    if (argc == 0 && nactive == 0)
        return 0;
    if (rule->type == CONF_REMAP_REVERSE_MAP) {
        if (argc > 0) {
            conf_error(ps->e, ps->file, line,
                       "reverse_map: %s: a reverse_map rule never matches a request, "
                       "so a filter on it would restrict nothing", argv[0]);
            return -1;
        }
        return 0;     /* the active named filters apply to request rules */
    }
    rule->acl = calloc((size_t)(nactive + 1), sizeof(*rule->acl));
    if (rule->acl == NULL) {
        conf_error(ps->e, ps->file, line, "out of memory");
        return -1;
    }
    if (argc > 0) {
        if (remap_acl_parse(ps, line, 1, argv, argc, &rule->acl[0]) < 0)
            return -1;
        rule->nacl = 1;
    }
    /* in activation order */
    for (int k = 0; k < nactive; k++) {
        struct remap_filter *next = NULL;
        struct conf_acl *a = &rule->acl[rule->nacl];

        for (int i = 0; i < ps->nfilters; i++) {
            struct remap_filter *f = &ps->filters[i];
            if (f->active > last && (next == NULL || f->active < next->active))
                next = f;
        }
        last = next->active;
        /* checked when defined: one that failed is reported already */
        if (remap_acl_parse(ps, line, 0, next->argv, next->argc, a) < 0)
            continue;
        if ((a->name = remap_name(ps->rm, next->name)) == NULL) {
            remap_acl_free(a);
            conf_error(ps->e, ps->file, line, "out of memory");
            return -1;
        }
        rule->nacl++;
    }
    for (int i = 0; i < rule->nacl; i++)
        if (rule->acl[i].nin > 0)
            rule->acl_local = 1;
    return 0;
}

/* The address of sa as 4 or 16 bytes (v4-mapped IPv6: as IPv4); returns
 * its family, or 0. */
static int
remap_addr(const struct sockaddr *sa, uint8_t out[16])
{
    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return AF_INET;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;

        if (IN6_IS_ADDR_V4MAPPED(a6)) {
            memcpy(out, &a6->s6_addr[12], 4);
            return AF_INET;
        }
        memcpy(out, a6, 16);
        return AF_INET6;
    }
    return 0;
}

/* Does any entry of list match the address?  An entry "~RANGE" matches
 * an address outside RANGE (ATS).  No entries: everything matches. */
static int
remap_acl_ip_match(const struct conf_acl_ip *list, int n, int family,
                   const uint8_t addr[16])
{
    size_t alen = family == AF_INET ? 4 : 16;

    if (n == 0)
        return 1;
    for (int i = 0; i < n; i++) {
        int in = 0;

        for (int j = 0; j < list[i].nranges && !in; j++) {
            const struct conf_ip_range *r = &list[i].ranges[j];
            in = family != 0 && r->family == family
                 && memcmp(addr, r->lo, alen) >= 0 && memcmp(addr, r->hi, alen) <= 0;
        }
        if (in != list[i].invert)
            return 1;
    }
    return 0;
}

int
conf_remap_acl_allows(const struct conf_remap *rm,
                      const struct conf_remap_rule *rule,
                      const struct sockaddr *peer, const struct sockaddr *local,
                      const char *mname, size_t mlen, const char **by)
{
    uint8_t pa[16], la[16];
    int pf = remap_addr(peer, pa), lf = remap_addr(local, la);
    unsigned method_bit = conf_method_bit(mname, mlen);

    for (int i = 0; i < rule->nacl; i++) {
        const struct conf_acl *a = &rule->acl[i];
        int ip = remap_acl_ip_match(a->src, a->nsrc, pf, pa)
                 && remap_acl_ip_match(a->in, a->nin, lf, la);
        int method = a->methods == 0 || (a->methods & method_bit) != 0;

        if (a->methods != 0 && method_bit == CONF_METHOD_OTHER) {
            method = 0;               /* by name: every such method has the bit */
            for (int j = 0; j < a->nmnames && !method; j++)
                method = strlen(a->mnames[j]) == mlen
                         && strncasecmp(a->mnames[j], mname, mlen) == 0;
        }

        /* @internal: only requests Cistern makes itself would match,
         * and none reaches a filter (a background revalidation replays a
         * client's request, which passed already). */
        if (a->internal)
            ip = 0;
        if (by != NULL)
            *by = a->name != NULL ? a->name : "in-line";
        if (rm->acl_policy == CONF_ACL_LEGACY) {
            if ((ip && method) != a->allow)
                return 0;
            continue;
        }
        if (!ip)
            continue;
        if (method)
            return a->allow;
        if (a->action != CONF_ACL_ADD_ALLOW && a->action != CONF_ACL_ADD_DENY)
            return !a->allow;
    }
    if (by != NULL)
        *by = NULL;
    return 1;
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
    for (int i = 0; i < rule->nacl; i++)
        remap_acl_free(&rule->acl[i]);
    free(rule->acl);
    rule->acl = NULL;
    rule->nacl = 0;
    conf_plugins_free(rule->plugins, rule->nplugins);
    free(rule->plan);
    rule->plan = NULL;
    rule->plugins = NULL;
    rule->nplugins = 0;
}

/* One file of an .include (name as written, path resolved), read where
 * the directive stood unless it would loop. */
static void
remap_include_file(struct remap_parse *ps, int line, const char *name, const char *path)
{
    const char *saved = ps->file;
    char       *real = realpath(path, NULL);

    if (ps->depth > REMAP_MAX_INCLUDE_DEPTH) {
        conf_error(ps->e, ps->file, line, ".include \"%s\": includes nested deeper than %d",
                   name, REMAP_MAX_INCLUDE_DEPTH);
        free(real);
        return;
    }
    if (real == NULL) {
        conf_error(ps->e, ps->file, line, ".include \"%s\": %s", name, strerror(errno));
        return;
    }
    for (int i = 0; i < ps->depth; i++) {
        if (ps->stack[i] != NULL && strcmp(ps->stack[i], real) == 0) {
            conf_error(ps->e, ps->file, line,
                       ".include \"%s\": include loop (the file is already "
                       "being read)", name);
            free(real);
            return;
        }
    }
    free(real);
    remap_parse_file(ps, path);
    ps->file = saved;
}

/* .include of a directory (ATS): each entry not itself a directory, in
 * alphasort order. */
static void
remap_include_dir(struct remap_parse *ps, int line, const char *name, const char *path)
{
    struct dirent **list;
    int n = scandir(path, &list, NULL, alphasort);

    if (n < 0) {
        conf_error(ps->e, ps->file, line, ".include \"%s\": %s", name, strerror(errno));
        return;
    }
    for (int i = 0; i < n; i++) {
        const char *d = list[i]->d_name;
        char *sub;
        struct stat st;

        if (strcmp(d, ".") != 0 && strcmp(d, "..") != 0
            && (sub = conf_path(path, d)) != NULL) {
            if (stat(sub, &st) != 0 || !S_ISDIR(st.st_mode))
                remap_include_file(ps, line, sub, sub);
            free(sub);
        }
        free(list[i]);
    }
    free(list);
}

/* .include PATH...: files and directories (relative to the configuration
 * directory), read in order where the directive stands. */
static void
remap_include(struct remap_parse *ps, int line, char *p)
{
    char *name;
    int   n = 0;

    while ((name = conf_token(&p)) != NULL) {
        char *path = conf_path(ps->dir, name);
        struct stat st;

        n++;
        if (path == NULL) {
            conf_error(ps->e, ps->file, line, "out of memory");
            return;
        }
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
            remap_include_dir(ps, line, name, path);
        else
            remap_include_file(ps, line, name, path);
        free(path);
    }
    if (n == 0)
        conf_error(ps->e, ps->file, line, ".include: missing file name");
}

/* The precedence class of a rule type (ATS): 0 map_with_recv_port, 1 map
 * and regex_map, 2 redirect and redirect_temporary, 3 regex_redirect and
 * regex_redirect_temporary; -1 never matches a request (reverse_map). */
static int
remap_class(enum conf_remap_type t)
{
    switch (t) {
    case CONF_REMAP_MAP_RECV_PORT:            return 0;
    case CONF_REMAP_MAP:
    case CONF_REMAP_REGEX_MAP:                return 1;
    case CONF_REMAP_REDIRECT:
    case CONF_REMAP_REDIRECT_TEMPORARY:       return 2;
    case CONF_REMAP_REGEX_REDIRECT:
    case CONF_REMAP_REGEX_REDIRECT_TEMPORARY: return 3;
    default:                                  return -1;
    }
}

/* A rule's fields after FROM TO, up to a comment: @plugin= and its
 * @pparam=s into *plugins (issue 22), the other @options into *opts (in
 * order; the strings stay in the line).  -1 after reporting an error, with
 * what was gathered freed. */
static int
remap_rule_opts(struct remap_parse *ps, int lineno, const struct remap_directive *d,
                char **p, char ***opts, int *nopts,
                struct conf_plugin **plugins, int *nplugins)
{
    char *opt;

    while ((opt = conf_token(p)) != NULL) {
        char **no;
        const char *pwhy = NULL;
        int prc;

        if (opt[0] == '#')
            break;
        /* @plugin= and its @pparam=s (issue 22): kept apart from the
         * filter's options, in order */
        if ((prc = conf_plugin_opt(plugins, nplugins, opt, lineno, &pwhy)) != 0) {
            if (prc < 0) {
                conf_error(ps->e, ps->file, lineno, "%s: %s", opt, pwhy);
                goto fail;
            }
            continue;
        }
        if (opt[0] != '@') {
            conf_error(ps->e, ps->file, lineno,
                       "%s: too many fields (unexpected \"%s\")", d->name,
                       opt);
            goto fail;
        }
        if ((no = realloc(*opts, sizeof(*no) * (size_t)(*nopts + 1))) == NULL) {
            conf_error(ps->e, ps->file, lineno, "out of memory");
            goto fail;
        }
        *opts = no;
        (*opts)[(*nopts)++] = opt;
    }
    return 0;
fail:
    free(*opts);
    *opts = NULL;
    conf_plugins_free(*plugins, *nplugins);
    *plugins = NULL;
    *nplugins = 0;
    return -1;
}

/* A regex rule's FROM host, compiled (anchored, case-insensitive) into
 * rule->re.  -1 after reporting an error. */
static int
remap_rule_regex(struct remap_parse *ps, int lineno, const struct remap_directive *d,
                 struct conf_remap_rule *rule)
{
    char *pat;
    int rc;

    if (asprintf(&pat, "^(%s)$", rule->from.host) < 0) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        return -1;
    }
    rc = regcomp(&rule->re, pat, REG_EXTENDED | REG_ICASE);
    free(pat);
    if (rc != 0) {
        char why[128];

        regerror(rc, &rule->re, why, sizeof(why));
        conf_error(ps->e, ps->file, lineno,
                   "%s: invalid regular expression \"%s\": %s", d->name,
                   rule->from.host, why);
        return -1;
    }
    rule->re_ok = 1;
    return 0;
}

static int
remap_line(void *arg, char *line, int lineno)
{
    struct remap_parse *ps = arg;
    const struct remap_directive *d = NULL;
    struct conf_remap_rule rule;
    char *p = line, *word, *from, *to, **opts = NULL;
    int   nopts = 0, regex, nplugins = 0;
    struct conf_plugin *plugins = NULL;

    word = conf_token(&p);
    for (size_t i = 0; i < sizeof(remap_directives) / sizeof(remap_directives[0]); i++)
        if (strcasecmp(word, remap_directives[i].name) == 0)
            d = &remap_directives[i];
    if (d == NULL) {
        conf_error(ps->e, ps->file, lineno, "unknown directive \"%s\"", word);
        return 0;
    }
    switch (d->word) {
    case REMAP_INCLUDE:
        remap_include(ps, lineno, p);
        return 0;
    case REMAP_UNSUPPORTED:
        /* deep-linking protection: a Referer check Cistern cannot make;
         * as a plain map it would serve what it protects */
        conf_error(ps->e, ps->file, lineno,
                   "%s: the Referer check (deep-linking protection) is not supported",
                   d->name);
        return 0;
    case REMAP_RULE:
        break;
    default:
        remap_filter_directive(ps, lineno, d->name, d->word, p);
        return 0;
    }
    regex = d->regex;

    from = conf_token(&p);
    to = from != NULL ? conf_token(&p) : NULL;
    if (to == NULL || to[0] == '#') {
        conf_error(ps->e, ps->file, lineno,
                   "%s: too few fields (expected %s FROM TO)", d->name,
                   d->name);
        return 0;
    }
    if (remap_rule_opts(ps, lineno, d, &p, &opts, &nopts, &plugins, &nplugins) < 0)
        return 0;

    memset(&rule, 0, sizeof(rule));
    rule.plugins = plugins;
    rule.nplugins = nplugins;
    if (nplugins > 0 && d->type != CONF_REMAP_MAP && d->type != CONF_REMAP_REGEX_MAP
        && d->type != CONF_REMAP_MAP_RECV_PORT) {
        conf_error(ps->e, ps->file, lineno, "%s: @plugin= runs on map rules only (a %s "
                   "rule never reaches the steps a plugin hooks)", d->name, d->name);
        free(opts);
        remap_rule_free(&rule);
        return 0;
    }
    rule.type = d->type;
    rule.re_ok = 0;
    rule.file = ps->file;
    rule.line = lineno;
    if (remap_opt_name(ps, lineno, d->name, opts, &nopts, &rule) < 0) {
        free(opts);
        return 0;
    }
    if (remap_url_parse(ps, lineno, from, regex, &rule.from) < 0
        || remap_url_parse(ps, lineno, to, 0, &rule.to) < 0
        || remap_rule_acls(ps, lineno, opts, nopts, &rule) < 0) {
        free(opts);
        remap_rule_free(&rule);
        return 0;
    }
    free(opts);

    /* Requests are matched on their normalised path (worker/http.h,
     * http_path_normalize): a from-path must be written the same way or
     * "/%7Euser/" would never match. */
    if (d->type != CONF_REMAP_REVERSE_MAP)
        rule.from.pathlen = remap_pct_normalise(rule.from.path);

    if (regex && remap_rule_regex(ps, lineno, d, &rule) < 0) {
        remap_rule_free(&rule);
        return 0;
    }
    if (d->type == CONF_REMAP_MAP_RECV_PORT)
        ps->rm->has_recv_port = 1;
    rule.cls = remap_class(rule.type);

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

static int
remap_path_matches(const struct conf_url *u, const char *path, size_t pathlen)
{
    return pathlen >= u->pathlen && memcmp(path, u->path, u->pathlen) == 0;
}

/* The directive that wrote rule (for messages). */
static const char *
remap_directive_name(const struct conf_remap_rule *rule)
{
    for (size_t i = 0; i < sizeof(remap_directives) / sizeof(remap_directives[0]); i++)
        if (remap_directives[i].word == REMAP_RULE && remap_directives[i].type == rule->type
            && remap_directives[i].regex == rule->re_ok)
            return remap_directives[i].name;
    return "rule";
}

/* Does earlier take every request later would?  Only when later names
 * one host (a host pattern's reach is not decided here), which earlier
 * names too or its pattern matches. */
static int
remap_shadows(const struct conf_remap_rule *earlier, const struct conf_remap_rule *later)
{
    regmatch_t m[1];

    if (earlier->cls != later->cls || earlier->cls < 0 || later->re_ok
        || strcmp(earlier->from.scheme, later->from.scheme) != 0
        || earlier->from.port != later->from.port
        || !remap_path_matches(&earlier->from, later->from.path, later->from.pathlen))
        return 0;
    if (earlier->re_ok)
        return regexec(&earlier->re, later->from.host, 1, m, 0) == 0;
    return strcmp(earlier->from.host, later->from.host) == 0;
}

/* The first matching rule of a class wins (ATS too: of the path prefixes
 * that match, the earliest rule), so a rule an earlier one shadows never
 * matches: an error when it has a filter (the restriction would silently
 * not be), a warning when it only routes. */
static void
remap_shadowed(struct remap_parse *ps)
{
    const struct conf_remap *rm = ps->rm;

    for (int i = 1; i < rm->nrules; i++) {
        const struct conf_remap_rule *r = &rm->rules[i], *by = NULL;
        char port[16], what[512];

        for (int j = 0; j < i && by == NULL; j++)
            if (remap_shadows(&rm->rules[j], r))
                by = &rm->rules[j];
        if (by == NULL)
            continue;
        snprintf(port, sizeof(port), ":%d", by->from.port);
        snprintf(what, sizeof(what), "line %d (%s %s://%s%s%s)", by->line,
                 remap_directive_name(by), by->from.scheme, by->from.host,
                 by->from.port_explicit ? port : "", by->from.path);
        if (r->nacl > 0)
            conf_error(ps->e, r->file, r->line, "this rule never matches: %s takes "
                       "every request it would, and the first matching rule wins "
                       "(as in ATS), so its filter would restrict nothing; put it "
                       "first", what);
        else
            conf_warn(ps->e, r->file, r->line, "this rule never matches: %s takes "
                      "every request it would, and the first matching rule wins "
                      "(as in ATS)", what);
    }
}

int
conf_remap_parse(struct conf_remap *rm, const char *file, const char *dir,
                 struct conf_errors *e)
{
    struct remap_parse ps;
    int                n0 = e->n, rc;

    memset(&ps, 0, sizeof(ps));
    ps.rm = rm;
    ps.dir = dir;
    ps.e = e;
    rc = remap_parse_file(&ps, file);
    if (rc == 0 && e->n == n0)
        remap_shadowed(&ps);
    for (int i = 0; i < ps.nfilters; i++)
        remap_filter_free(&ps.filters[i]);
    free(ps.filters);
    if (rc < 0)
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
    for (int i = 0; i < rm->nnames; i++)
        free(rm->names[i]);
    free(rm->names);
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
    if (r->re_ok)     /* regex_map, regex_redirect*, regex_map_with_recv_port */
        return lchost != NULL && regexec(&r->re, lchost, nm, m, 0) == 0;
    return hostlen == r->from.hostlen
           && strncasecmp(host, r->from.host, hostlen) == 0;
}

const struct conf_remap_rule *
conf_remap_find(const struct conf_remap *rm, const char *scheme,
                const char *host, size_t hostlen, int port,
                const char *path, size_t pathlen,
                struct conf_remap_result *res)
{
    return conf_remap_find_recv(rm, scheme, host, hostlen, port, 0, path,
                                pathlen, res);
}

const struct conf_remap_rule *
conf_remap_find_recv(const struct conf_remap *rm, const char *scheme,
                     const char *host, size_t hostlen, int port, int recv_port,
                     const char *path, size_t pathlen,
                     struct conf_remap_result *res)
{
    char        lchost[256];
    const char *lc = NULL;
    regmatch_t  m[11];
    int         pass;

    /* regexec() wants a NUL-terminated string; a host that does not fit a
     * DNS name cannot match a regex rule anyway. */
    if (hostlen < sizeof(lchost) && memchr(host, '\0', hostlen) == NULL) {
        for (size_t i = 0; i < hostlen; i++)
            lchost[i] = (char)tolower((unsigned char)host[i]);
        lchost[hostlen] = '\0';
        lc = lchost;
    }

    /* without map_with_recv_port rules (or a known port) class 0 is empty */
    for (pass = rm->has_recv_port && recv_port > 0 ? 0 : 1; pass < 4; pass++) {
        for (int i = 0; i < rm->nrules; i++) {
            const struct conf_remap_rule *r = &rm->rules[i];
            size_t len = 0;

            if (r->cls != pass)
                continue;
            if (strcasecmp(scheme, r->from.scheme) != 0
                || (pass == 0 ? recv_port : port) != r->from.port
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
            if (r->re_ok) {
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
    if (auth < path && *auth == '[') {     /* "http://" ends at auth */
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
