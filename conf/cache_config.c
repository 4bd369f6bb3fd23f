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

struct cc_parse {
    struct conf_cache  *cc;
    const char         *file;
    struct conf_errors *e;
};

/* A selector label (conf/selector.c) or one cache.config refuses; 0 or -1
 * (error recorded).  Unknown labels end here too. */
static int
cc_selector(struct cc_parse *ps, struct conf_cache_rule *r, const char *label,
            const char *value, int line)
{
    int rc;

    if (strcasecmp(label, "dest_ip") == 0) {
        conf_error(ps->e, ps->file, line, "dest_ip=%s: not supported: Cistern decides "
                   "what to cache before it resolves the origin; use dest_domain= or "
                   "host_regex=", value);
        return -1;
    }
    if (strcasecmp(label, "tag") == 0 || strcasecmp(label, "iport") == 0) {
        conf_error(ps->e, ps->file, line, "%s=%s: not supported; this rule would "
                   "apply to more requests than it names", label, value);
        return -1;
    }
    rc = conf_sel_parse(&r->sel, &conf_sel_cache, label, value, ps->file, line, ps->e);
    if (rc == 0)
        conf_error(ps->e, ps->file, line, "unknown specifier \"%s\"", label);
    else if (rc == -2)
        conf_error(ps->e, ps->file, line, "%s= given twice (each secondary specifier "
                   "appears at most once)", label);
    if (rc == 1 && r->sel.primary == CONF_SEL_URL_REGEX)
        ps->cc->need_url = 1;
    return rc == 1 ? 0 : -1;
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
    conf_sel_free(&r->sel);
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
    conf_sel_init(&r.sel);
    r.cookies = -1;
    r.line = lineno;
    while (!bad && (rc = conf_pair(&cur, &label, &value, &why)) != 0) {
        if (rc < 0) {
            conf_error(ps->e, ps->file, lineno, "%s", why);
            bad = 1;
        } else if ((rc = cc_directive(ps, &r, label, value, lineno)) != 0) {
            bad = rc < 0;
        } else {
            bad = cc_selector(ps, &r, label, value, lineno) < 0;
        }
    }
    if (!bad && r.sel.primary == 0) {
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
    const struct conf_sel_req sq = {
        .scheme = q->scheme, .host = q->host, .hostlen = q->hostlen, .port = q->port,
        .path = q->path, .pathlen = q->pathlen, .url = q->url, .method = q->method,
        .src = q->src, .tod = q->tod,
    };
    for (int i = 0; i < cc->nrules; i++) {
        const struct conf_cache_rule *r = &cc->rules[i];

        if (!conf_sel_match(&r->sel, &conf_sel_cache, &sq))
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
