/*
 * conf/cache_config.c: cache.config, ATS's per-URL caching policy, and the
 * records.config values that policy needs in a ready form
 * (negative_caching_list as a bitmap).
 *
 * A line is "primary=value [secondary=value ...] directive":
 *   primary     dest_domain= (the host or a subdomain of it; "." every
 *               host), dest_host= (that host only),
 *               host_regex=, url_regex= (POSIX extended regular
 *               expressions, searched unanchored as ATS's PCRE ones are);
 *   secondary   prefix=, suffix= (comma list, any case), port= (N or N-M),
 *               scheme=, method=, time= (HH:MM[:SS]-HH:MM[:SS], local),
 *               src_ip= (addresses, ranges, CIDRs), internal=true|false;
 *   directive   action=never-cache|standard-cache|ignore-no-cache|
 *               ignore-client-no-cache|ignore-server-no-cache|
 *               cluster-cache-local, ttl-in-cache=T, revalidate=T, plus the
 *               optional tweak cache-responses-to-cookies=0..4.
 * Values may be quoted ("a b").  Everything is matched against the request
 * after remap (the origin's scheme, host, port and path), as ATS does.
 *
 * Fail closed: what would change what is cached and is not implemented is
 * an error with file:line, never a warning: dest_ip= (Cistern decides
 * before it resolves the origin), pin-in-cache= (the S3-FIFO / FIFO
 * eviction cannot keep an object), tag=, iport=, unknown labels, two
 * directives on a line, a repeated secondary.  cluster-cache-local asks
 * for what a single node always does: accepted, noted as "matches".
 *
 * Precedence is ATS's code (ATS 9 and 10; its documentation describes a
 * "later line wins" that the code does not do, ATS issue #2796): every
 * line is checked; for each kind of directive the earliest matching line
 * wins; ttl-in-cache cancels never-cache wherever it is; the ignore-*
 * actions add up.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

/* ATS's duration syntax: digits each followed by a unit (w d h m s); digits
 * at the end are seconds.  "1d2h3m4s", "90", "5m30". */
int
conf_parse_duration(const char *s, int *out)
{
    int64_t total = 0, v = 0;
    int     digits = 0;

    if (s == NULL || *s == '\0')
        return -1;
    for (const char *p = s; *p; p++) {
        if (*p >= '0' && *p <= '9') {
            v = v * 10 + (*p - '0');
            digits = 1;
            if (v > INT_MAX)
                return -1;
            continue;
        }
        int64_t mul;
        switch (*p) {
        case 'w': mul = 7 * 86400; break;
        case 'd': mul = 86400; break;
        case 'h': mul = 3600; break;
        case 'm': mul = 60; break;
        case 's': mul = 1; break;
        default: return -1;
        }
        if (!digits)
            return -1;
        total += v * mul;
        if (total > INT_MAX)
            return -1;
        v = 0;
        digits = 0;
    }
    total += v;
    if (total > INT_MAX)
        return -1;
    *out = (int)total;
    return 0;
}

/* "HH:MM[:SS]" as seconds of the day, or -1. */
static int
cc_time_of_day(const char *s)
{
    int h, m, sec = 0, n = 0;

    if (sscanf(s, "%2d:%2d%n", &h, &m, &n) != 2)
        return -1;
    if (s[n] == ':') {
        int n2 = 0;
        if (sscanf(s + n + 1, "%2d%n", &sec, &n2) != 1)
            return -1;
        n += 1 + n2;
    }
    if (s[n] != '\0' || h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec > 59)
        return -1;
    return h * 3600 + m * 60 + sec;
}

struct cc_parse {
    struct conf_cache  *cc;
    const char         *file;
    struct conf_errors *e;
};

/* A primary destination; 0 or -1 (error recorded). */
static int
cc_primary(struct cc_parse *ps, struct conf_cache_rule *r, const char *label,
           const char *value, int line)
{
    if (r->primary) {
        conf_error(ps->e, ps->file, line, "%s=: a line has one primary destination", label);
        return -1;
    }
    if (strcasecmp(label, "dest_domain") == 0 || strcasecmp(label, "dest_host") == 0) {
        /* ATS's HostMatcher: dest_domain is a domain record (the host and
         * its subdomains; "." is the root, every host), dest_host a host
         * record (that host only); trailing dots are optional on both
         * sides. */
        r->host_only = strcasecmp(label, "dest_host") == 0;
        while (*value == '.')
            value++;
        r->domain = strdup(value);
        if (r->domain == NULL)
            return -1;
        for (char *q = r->domain; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        r->domainlen = strlen(r->domain);
        while (r->domainlen > 0 && r->domain[r->domainlen - 1] == '.')
            r->domain[--r->domainlen] = '\0';
        r->primary = CONF_CC_DOMAIN;
        if (r->host_only && r->domainlen == 0) {
            conf_error(ps->e, ps->file, line, "%s=%s: not a host name", label, value);
            return -1;
        }
        return 0;
    }
    int host = strcasecmp(label, "host_regex") == 0;
    int rc = regcomp(&r->re, value, REG_EXTENDED | REG_NOSUB | (host ? REG_ICASE : 0));
    if (rc != 0) {
        char msg[128];
        regerror(rc, &r->re, msg, sizeof(msg));
        conf_error(ps->e, ps->file, line, "%s=%s: bad regular expression: %s", label, value, msg);
        return -1;
    }
    r->re_ok = 1;
    r->primary = host ? CONF_CC_HOST_REGEX : CONF_CC_URL_REGEX;
    if (!host)
        ps->cc->need_url = 1;
    return 0;
}

/* A secondary specifier; 0 or -1 (error recorded). */
static int
cc_secondary(struct cc_parse *ps, struct conf_cache_rule *r, const char *label,
             const char *value, int line)
{
    const char *why = NULL;
    char *end;

    if (strcasecmp(label, "prefix") == 0) {
        if (r->prefix)
            goto twice;
        while (*value == '/')
            value++;
        if (asprintf(&r->prefix, "/%s", value) < 0) {
            r->prefix = NULL;
            return -1;
        }
        r->prefixlen = strlen(r->prefix);
    } else if (strcasecmp(label, "suffix") == 0) {
        if (r->suffix)
            goto twice;
        r->suffix = strdup(value);
    } else if (strcasecmp(label, "port") == 0) {
        if (r->port_lo)
            goto twice;
        long lo = strtol(value, &end, 10), hi = lo;
        if (*end == '-')
            hi = strtol(end + 1, &end, 10);
        if (*end != '\0' || lo < 1 || hi > 65535 || hi < lo) {
            conf_error(ps->e, ps->file, line, "port=%s: expected a port or a range N-M", value);
            return -1;
        }
        r->port_lo = (int)lo;
        r->port_hi = (int)hi;
    } else if (strcasecmp(label, "scheme") == 0) {
        if (r->scheme)
            goto twice;
        if (strcasecmp(value, "http") != 0 && strcasecmp(value, "https") != 0) {
            conf_error(ps->e, ps->file, line, "scheme=%s: expected http or https", value);
            return -1;
        }
        r->scheme = strdup(value);
    } else if (strcasecmp(label, "method") == 0) {
        if (r->method)
            goto twice;
        r->method = strdup(value);
    } else if (strcasecmp(label, "time") == 0) {
        if (r->tod_lo >= 0)
            goto twice;
        char buf[32];
        char *dash;
        snprintf(buf, sizeof(buf), "%s", value);
        dash = strchr(buf, '-');
        if (dash)
            *dash = '\0';
        r->tod_lo = dash ? cc_time_of_day(buf) : -1;
        r->tod_hi = dash ? cc_time_of_day(dash + 1) : -1;
        if (r->tod_lo < 0 || r->tod_hi < 0) {
            r->tod_lo = 0;
            conf_error(ps->e, ps->file, line, "time=%s: expected HH:MM-HH:MM", value);
            return -1;
        }
    } else if (strcasecmp(label, "src_ip") == 0) {
        if (r->src.nrules)
            goto twice;
        if (conf_ip_list_parse(&r->src, value, &why) < 0 || r->src.nrules == 0) {
            conf_error(ps->e, ps->file, line, "src_ip=%s: %s", value, why ? why : "no address");
            return -1;
        }
    } else if (strcasecmp(label, "internal") == 0) {
        if (r->internal >= 0)
            goto twice;
        if (strcasecmp(value, "true") != 0 && strcasecmp(value, "false") != 0) {
            conf_error(ps->e, ps->file, line, "internal=%s: expected true or false", value);
            return -1;
        }
        r->internal = strcasecmp(value, "true") == 0;
    } else if (strcasecmp(label, "dest_ip") == 0) {
        conf_error(ps->e, ps->file, line, "dest_ip=%s: not supported: Cistern decides "
                   "what to cache before it resolves the origin; use dest_domain= or "
                   "host_regex=", value);
        return -1;
    } else if (strcasecmp(label, "tag") == 0 || strcasecmp(label, "iport") == 0) {
        conf_error(ps->e, ps->file, line, "%s=%s: not supported; this rule would "
                   "apply to more requests than it names", label, value);
        return -1;
    } else {
        conf_error(ps->e, ps->file, line, "unknown specifier \"%s\"", label);
        return -1;
    }
    return 0;
twice:
    conf_error(ps->e, ps->file, line, "%s= given twice (each secondary specifier "
               "appears at most once)", label);
    return -1;
}

static const struct {
    const char *name;
    enum conf_cc_action action;
} cc_actions[] = {
    { "never-cache", CONF_CC_NEVER_CACHE },
    { "standard-cache", CONF_CC_STANDARD_CACHE },
    { "ignore-no-cache", CONF_CC_IGNORE_NO_CACHE },
    { "ignore-client-no-cache", CONF_CC_IGNORE_CLIENT_NO_CACHE },
    { "ignore-server-no-cache", CONF_CC_IGNORE_SERVER_NO_CACHE },
    { "cluster-cache-local", CONF_CC_CLUSTER_CACHE_LOCAL },
};

/* The directive, or the cookies tweak.  1 when label is one, 0 when not,
 * -1 after an error. */
static int
cc_directive(struct cc_parse *ps, struct conf_cache_rule *r, const char *label,
             const char *value, int line)
{
    enum conf_cc_action a = 0;

    if (strcasecmp(label, "cache-responses-to-cookies") == 0) {
        char *end;
        long v = strtol(value, &end, 10);
        if (*end != '\0' || v < 0 || v > 4) {
            conf_error(ps->e, ps->file, line,
                       "cache-responses-to-cookies=%s: expected 0 to 4", value);
            return -1;
        }
        r->cookies = (int)v;
        return 1;
    }
    if (strcasecmp(label, "action") == 0) {
        for (size_t i = 0; i < sizeof(cc_actions) / sizeof(cc_actions[0]); i++)
            if (strcasecmp(value, cc_actions[i].name) == 0)
                a = cc_actions[i].action;
        if (a == 0) {
            conf_error(ps->e, ps->file, line, "action=%s: unknown action (expected "
                       "never-cache, ignore-no-cache, ignore-client-no-cache or "
                       "ignore-server-no-cache)", value);
            return -1;
        }
    } else if (strcasecmp(label, "ttl-in-cache") == 0) {
        a = CONF_CC_TTL_IN_CACHE;
    } else if (strcasecmp(label, "revalidate") == 0) {
        a = CONF_CC_REVALIDATE;
    } else if (strcasecmp(label, "pin-in-cache") == 0) {
        conf_error(ps->e, ps->file, line, "pin-in-cache=%s: not supported: Cistern's "
                   "eviction cannot keep an object in the cache", value);
        return -1;
    } else {
        return 0;
    }
    if (r->action) {
        conf_error(ps->e, ps->file, line, "%s: a line has one directive (action=, "
                   "ttl-in-cache= or revalidate=)", label);
        return -1;
    }
    if ((a == CONF_CC_TTL_IN_CACHE || a == CONF_CC_REVALIDATE)
        && conf_parse_duration(value, &r->secs) < 0) {
        conf_error(ps->e, ps->file, line, "%s=%s: not a time (e.g. 90, 30s, 1d2h3m4s)",
                   label, value);
        return -1;
    }
    r->action = a;
    return 1;
}

static void
cc_rule_free(struct conf_cache_rule *r)
{
    free(r->domain);
    if (r->re_ok)
        regfree(&r->re);
    free(r->prefix);
    free(r->suffix);
    free(r->scheme);
    free(r->method);
    conf_ip_allow_free(&r->src);
    memset(r, 0, sizeof(*r));
}

static int
cc_line(void *arg, char *line, int lineno)
{
    struct cc_parse *ps = arg;
    struct conf_cache_rule r;
    char *cur = line, *label, *value;
    const char *why = NULL;
    int rc, bad = 0;

    memset(&r, 0, sizeof(r));
    r.tod_lo = r.tod_hi = -1;
    r.internal = -1;
    r.cookies = -1;
    r.line = lineno;
    while (!bad && (rc = conf_pair(&cur, &label, &value, &why)) != 0) {
        if (rc < 0) {
            conf_error(ps->e, ps->file, lineno, "%s", why);
            bad = 1;
        } else if (strcasecmp(label, "dest_domain") == 0 || strcasecmp(label, "dest_host") == 0
                   || strcasecmp(label, "host_regex") == 0
                   || strcasecmp(label, "url_regex") == 0) {
            bad = cc_primary(ps, &r, label, value, lineno) < 0;
        } else if ((rc = cc_directive(ps, &r, label, value, lineno)) != 0) {
            bad = rc < 0;
        } else {
            bad = cc_secondary(ps, &r, label, value, lineno) < 0;
        }
    }
    if (!bad && r.primary == 0) {
        conf_error(ps->e, ps->file, lineno, "no primary destination (dest_domain=, "
                   "dest_host=, host_regex= or url_regex=)");
        bad = 1;
    } else if (!bad && r.action == 0) {
        conf_error(ps->e, ps->file, lineno, "no directive (action=, ttl-in-cache= or "
                   "revalidate=)");
        bad = 1;
    }
    if (bad) {
        cc_rule_free(&r);
        return 0;
    }
    if (r.action == CONF_CC_CLUSTER_CACHE_LOCAL)
        conf_note(ps->e, CONF_NOTE_MATCHES, ps->file, lineno,
                  "action=cluster-cache-local: one node caches locally anyway");
    else
        conf_note(ps->e, CONF_NOTE_USED, ps->file, lineno, "cache.config rule");
    struct conf_cache_rule *nr = realloc(ps->cc->rules,
                                         sizeof(*nr) * (size_t)(ps->cc->nrules + 1));
    if (nr == NULL) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        cc_rule_free(&r);
        return -1;
    }
    ps->cc->rules = nr;
    nr[ps->cc->nrules++] = r;
    return 0;
}

int
conf_cache_parse(struct conf_cache *cc, const char *file, struct conf_errors *e)
{
    struct cc_parse ps = { .cc = cc, .file = file, .e = e };
    int n0 = e->n;

    if (conf_foreach_line(file, e, cc_line, &ps) < 0)
        return -1;
    return e->n == n0 ? 0 : -1;
}

int
conf_cache_records(struct conf_cache *cc, const struct conf_records *r,
                   const char *recfile, struct conf_errors *e)
{
    const char *p = r->negative_caching_list;

    memset(cc->neg, 0, sizeof(cc->neg));
    while (p && *p) {
        char *end;
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        long v = strtol(p, &end, 10);
        if (end == p || v < 100 || v > 999
            || (*end && *end != ' ' && *end != '\t' && *end != ',')) {
            conf_error(e, recfile, 0, "proxy.config.http.negative_caching_list: "
                       "\"%s\" is not a list of status codes", r->negative_caching_list);
            return -1;
        }
        cc->neg[v / 8] |= (uint8_t)(1u << (v % 8));
        p = end;
    }
    return 0;
}

void
conf_cache_free(struct conf_cache *cc)
{
    for (int i = 0; i < cc->nrules; i++)
        cc_rule_free(&cc->rules[i]);
    free(cc->rules);
    memset(cc, 0, sizeof(*cc));
}

/* ------------------------------------------------------------------ */
/* Matching */

static int
cc_suffix_matches(const char *list, const char *path, size_t pathlen)
{
    const char *p = list;

    if (strcmp(list, "*") == 0)
        return 1;
    while (*p) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        if (n > 0 && n <= pathlen && strncasecmp(path + pathlen - n, p, n) == 0)
            return 1;
        p += n + (c != NULL);
    }
    return 0;
}

static int
cc_rule_matches(const struct conf_cache_rule *r, const struct conf_cache_req *q)
{
    size_t plen = q->pathlen;     /* prefix= and suffix= see the path alone */
    const char *qm = memchr(q->path, '?', q->pathlen);

    if (qm)
        plen = (size_t)(qm - q->path);
    switch (r->primary) {
    case CONF_CC_DOMAIN: {
        size_t hl = q->hostlen;

        while (hl > 0 && q->host[hl - 1] == '.')
            hl--;       /* "example.com." is example.com */
        if (hl == 0 || hl < r->domainlen
            || strncasecmp(q->host + hl - r->domainlen, r->domain, r->domainlen) != 0)
            return 0;
        /* a longer host: a subdomain (at a label boundary) of a domain */
        if (hl > r->domainlen
            && (r->host_only
                || (r->domainlen > 0 && q->host[hl - r->domainlen - 1] != '.')))
            return 0;
        break;
    }
    case CONF_CC_HOST_REGEX: {
        char h[256];
        if (q->hostlen >= sizeof(h))
            return 0;
        memcpy(h, q->host, q->hostlen);
        h[q->hostlen] = '\0';
        if (regexec(&r->re, h, 0, NULL, 0) != 0)
            return 0;
        break;
    }
    case CONF_CC_URL_REGEX:
        if (q->url == NULL || regexec(&r->re, q->url, 0, NULL, 0) != 0)
            return 0;
        break;
    default:
        return 0;
    }
    if (r->prefix && (plen < r->prefixlen || memcmp(q->path, r->prefix, r->prefixlen) != 0))
        return 0;
    if (r->suffix && !cc_suffix_matches(r->suffix, q->path, plen))
        return 0;
    if (r->port_lo && (q->port < r->port_lo || q->port > r->port_hi))
        return 0;
    if (r->scheme && strcasecmp(r->scheme, q->scheme) != 0)
        return 0;
    if (r->method && (q->method == NULL || strcasecmp(r->method, q->method) != 0))
        return 0;
    if (r->tod_lo >= 0 && (q->tod < r->tod_lo || q->tod > r->tod_hi))
        return 0;
    if (r->src.nrules && (q->src == NULL || !conf_ip_allowed(&r->src, q->src, CONF_METHOD_GET)))
        return 0;
    if (r->internal == 1)
        return 0;       /* no request of ours is internal (no plugins) */
    return 1;
}

int
conf_cache_match(const struct conf_cache *cc, const struct conf_cache_req *q,
                 struct conf_cache_result *res)
{
    int never = -1, ttl = -1, reval = -1, n = 0;

    res->never_cache = 0;
    res->ignore_client_no_cache = res->ignore_server_no_cache = 0;
    res->ttl_in_cache = 0;
    res->revalidate = -1;
    res->cookies = -1;
    for (int i = 0; i < cc->nrules; i++) {
        const struct conf_cache_rule *r = &cc->rules[i];

        if (!cc_rule_matches(r, q))
            continue;
        n++;
        if (r->cookies >= 0 && res->cookies < 0)
            res->cookies = r->cookies;
        switch (r->action) {
        case CONF_CC_NEVER_CACHE:
        case CONF_CC_STANDARD_CACHE:
            if (never < 0)
                never = r->action == CONF_CC_NEVER_CACHE;
            break;
        case CONF_CC_IGNORE_NO_CACHE:
            res->ignore_client_no_cache = res->ignore_server_no_cache = 1;
            break;
        case CONF_CC_IGNORE_CLIENT_NO_CACHE:
            res->ignore_client_no_cache = 1;
            break;
        case CONF_CC_IGNORE_SERVER_NO_CACHE:
            res->ignore_server_no_cache = 1;
            break;
        case CONF_CC_TTL_IN_CACHE:
            if (ttl < 0)
                ttl = r->secs;
            break;
        case CONF_CC_REVALIDATE:
            if (reval < 0)
                reval = r->secs;
            break;
        default:
            break;
        }
    }
    if (ttl >= 0) {
        res->ttl_in_cache = ttl;
        never = 0;      /* ttl-in-cache overrides never-cache */
    }
    res->never_cache = never > 0;
    res->revalidate = reval;
    return n;
}
