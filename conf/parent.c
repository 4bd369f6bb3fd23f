/*
 * conf/parent.c: parent.config, ATS's parent proxies and origin pools.
 *
 * A line is "primary=value [secondary=value ...] action=value ...":
 *   primary     dest_domain= (the host or a subdomain of it; "." is every
 *               host), dest_host= (that name only), dest_ip= (an IP
 *               literal in the target: addresses, ranges a-b, CIDRs; a name
 *               is never resolved to be matched), host_regex=, url_regex=
 *               (POSIX extended, searched unanchored as ATS's PCRE ones);
 *   secondary   port= (N or N-M), scheme=, prefix=, suffix= (comma list),
 *               method=, src_ip=, internal=true|false;
 *   actions     parent="host:port|weight&hash;..." (',' separates too),
 *               secondary_parent=, round_robin=true|strict|false|
 *               consistent_hash|latched, go_direct=, parent_is_proxy=,
 *               qstring=consider|ignore, parent_retry=simple_retry|
 *               unavailable_server_retry|both, simple_server_retry_responses=,
 *               unavailable_server_retry_responses=, max_simple_retries=,
 *               max_unavailable_server_retries= (1 to 5), secondary_mode=
 *               (1 to 3), ignore_self_detect=false, host_override=false.
 * Everything is matched against the request after remap, as ATS does.
 * The first matching line wins (ATS's ControlMatcher keeps the lowest
 * line number across its matchers).
 *
 * Fail closed: an unknown label, a repeated one, a value out of range, a
 * parent without a port, time= (a rule that holds only part of the day
 * would route the rest elsewhere without saying), hash_algorithm= other
 * than ATS's default, host_override=true: an error with file:line.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"

struct pp_parse {
    struct conf_parents *pp;
    const char          *file;
    struct conf_errors  *e;
};

uint64_t
conf_parent_hash(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    /* murmur3's fmix64: every input bit moves every output bit */
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t
pp_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;     /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Weighted rendezvous hashing (highest random weight): host i scores
 * -w_i / ln(u_i), u_i uniform in (0, 1) from the key and the host's
 * identity.  The highest score owns the key; a host's share is its weight
 * over the total, and a host that goes away takes only its own keys. */
void
conf_parent_rank(const struct conf_parent_host *hosts, int n, uint64_t key,
                 int *order)
{
    double score[CONF_PP_MAX_PARENTS];

    for (int i = 0; i < n && i < CONF_PP_MAX_PARENTS; i++) {
        uint64_t x = pp_mix(key ^ hosts[i].hid);
        double u = ((double)(x >> 11) + 0.5) / 9007199254740992.0;   /* 2^53 */
        score[i] = -hosts[i].weight / log(u);
        order[i] = i;
    }
    for (int i = 1; i < n && i < CONF_PP_MAX_PARENTS; i++) {   /* n is small */
        int k = order[i], j = i;
        while (j > 0 && score[order[j - 1]] < score[k]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
}

int
conf_parent_code(const uint8_t *bits, int status)
{
    return status >= 0 && status < 1000 && (bits[status / 8] >> (status % 8)) & 1;
}

static int
pp_bool(const char *v, int *out)
{
    if (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0)
        *out = 1;
    else if (strcasecmp(v, "false") == 0 || strcmp(v, "0") == 0)
        *out = 0;
    else
        return -1;
    return 0;
}

/* One "host:port[|weight][&hash]" of a parent list into h.  NULL, or why
 * not. */
static const char *
pp_host(char *s, struct conf_parent_host *h)
{
    char *hash = strchr(s, '&'), *bar, *colon, *end;
    char id[300];

    memset(h, 0, sizeof(*h));
    if (hash)
        *hash++ = '\0';
    if ((bar = strchr(s, '|')) != NULL) {
        *bar++ = '\0';
        h->weight = strtod(bar, &end);
        if (end == bar || *end != '\0' || !(h->weight > 0) || h->weight > 1e6)
            return "the weight after '|' is not a positive number";
    } else {
        h->weight = 1.0;
    }
    if (s[0] == '[') {
        colon = strchr(s, ']');
        if (colon == NULL || colon[1] != ':')
            return "expected [ipv6]:port";
        colon++;
    } else {
        colon = strrchr(s, ':');
    }
    if (colon == NULL || colon == s)
        return "a parent needs host:port (the port is required)";
    *colon++ = '\0';
    long port = strtol(colon, &end, 10);
    if (*colon == '\0' || *end != '\0' || port < 1 || port > 65535)
        return "the port is not 1-65535";
    if (strlen(s) >= sizeof(h->host))
        return "host name too long";
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(isalnum(c) || c == '.' || c == '-' || c == '_' || c == ':'
              || c == '[' || c == ']'))
            return "not a host name or address";
        h->host[i] = (char)tolower(c);
    }
    h->port = (int)port;
    snprintf(h->name, sizeof(h->name), "%s:%d", h->host, h->port);
    if (hash && *hash)
        snprintf(id, sizeof(id), "%s", hash);
    else
        snprintf(id, sizeof(id), "%s", h->name);
    h->hid = conf_parent_hash(id, strlen(id));
    return NULL;
}

/* Append the parents of list (';' or ',' separated) to r.  0 or -1. */
static int
pp_hosts(struct pp_parse *ps, struct conf_parent_rule *r, const char *label,
         char *list, int line, int *count)
{
    char *save = NULL, *tok;

    for (tok = strtok_r(list, ";,", &save); tok; tok = strtok_r(NULL, ";,", &save)) {
        tok = conf_trim(tok);
        if (*tok == '\0')
            continue;
        if (r->nprimary + r->nsecondary >= CONF_PP_MAX_PARENTS) {
            conf_error(ps->e, ps->file, line, "%s=: more than %d parents on a line",
                       label, CONF_PP_MAX_PARENTS);
            return -1;
        }
        struct conf_parent_host h;
        char copy[300];
        snprintf(copy, sizeof(copy), "%s", tok);
        const char *why = pp_host(tok, &h);
        if (why) {
            conf_error(ps->e, ps->file, line, "%s=: \"%s\": %s", label, copy, why);
            return -1;
        }
        int n = r->nprimary + r->nsecondary;
        struct conf_parent_host *nh = realloc(r->hosts, sizeof(*nh) * (size_t)(n + 1));
        if (nh == NULL)
            return -1;
        r->hosts = nh;
        nh[n] = h;
        (*count)++;
    }
    if (*count == 0) {
        conf_error(ps->e, ps->file, line, "%s=: no parent in the list", label);
        return -1;
    }
    return 0;
}

/* "503,504" into bits (every code 400-599 as ATS wants).  0 or -1. */
static int
pp_codes(const char *list, uint8_t *bits, int lo)
{
    const char *p = list;
    int n = 0;

    memset(bits, 0, 125);
    while (*p) {
        char *end;
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        long v = strtol(p, &end, 10);
        if (end == p || v < lo || v > 599 || (*end && *end != ',' && *end != ' '))
            return -1;
        bits[v / 8] |= (uint8_t)(1u << (v % 8));
        n++;
        p = end;
    }
    return n ? 0 : -1;
}

static int
pp_primary(struct pp_parse *ps, struct conf_parent_rule *r, const char *label,
           const char *value, int line)
{
    const char *why = NULL;

    if (r->primary) {
        conf_error(ps->e, ps->file, line, "%s=: a line has one primary destination", label);
        return -1;
    }
    if (strcasecmp(label, "dest_domain") == 0 || strcasecmp(label, "dest_host") == 0) {
        int dom = strcasecmp(label, "dest_domain") == 0;
        if (dom)
            while (*value == '.')
                value++;
        if ((r->domain = strdup(value)) == NULL)
            return -1;
        for (char *q = r->domain; *q; q++)
            *q = (char)tolower((unsigned char)*q);
        r->domainlen = strlen(r->domain);
        while (r->domainlen > 0 && r->domain[r->domainlen - 1] == '.')
            r->domain[--r->domainlen] = '\0';     /* trailing dots optional */
        if (!dom && r->domainlen == 0) {
            conf_error(ps->e, ps->file, line, "dest_host=%s: not a host name", value);
            return -1;
        }
        r->primary = dom ? CONF_PP_DOMAIN : CONF_PP_HOST;
        return 0;
    }
    if (strcasecmp(label, "dest_ip") == 0) {
        if (conf_ip_list_parse(&r->ip, value, &why) < 0 || r->ip.nrules == 0) {
            conf_error(ps->e, ps->file, line, "dest_ip=%s: %s", value, why ? why : "no address");
            return -1;
        }
        r->primary = CONF_PP_IP;
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
    r->primary = host ? CONF_PP_HOST_REGEX : CONF_PP_URL_REGEX;
    if (!host)
        ps->pp->need_url = 1;
    return 0;
}

/* A secondary specifier: 1 taken, 0 not one, -1 error recorded. */
static int
pp_secondary(struct pp_parse *ps, struct conf_parent_rule *r, const char *label,
             const char *value, int line)
{
    const char *why = NULL;
    char *end;

    if (strcasecmp(label, "prefix") == 0) {
        if (r->prefix)
            return -2;
        while (*value == '/')
            value++;
        if (asprintf(&r->prefix, "/%s", value) < 0) {
            r->prefix = NULL;
            return -1;
        }
        r->prefixlen = strlen(r->prefix);
    } else if (strcasecmp(label, "suffix") == 0) {
        if (r->suffix)
            return -2;
        r->suffix = strdup(value);
    } else if (strcasecmp(label, "port") == 0) {
        if (r->port_lo)
            return -2;
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
            return -2;
        if (strcasecmp(value, "http") != 0 && strcasecmp(value, "https") != 0) {
            conf_error(ps->e, ps->file, line, "scheme=%s: expected http or https", value);
            return -1;
        }
        r->scheme = strdup(value);
    } else if (strcasecmp(label, "method") == 0) {
        if (r->method)
            return -2;
        r->method = strdup(value);
    } else if (strcasecmp(label, "src_ip") == 0) {
        if (r->src.nrules)
            return -2;
        if (conf_ip_list_parse(&r->src, value, &why) < 0 || r->src.nrules == 0) {
            conf_error(ps->e, ps->file, line, "src_ip=%s: %s", value, why ? why : "no address");
            return -1;
        }
    } else if (strcasecmp(label, "internal") == 0) {
        if (r->internal >= 0)
            return -2;
        if (pp_bool(value, &r->internal) < 0) {
            conf_error(ps->e, ps->file, line, "internal=%s: expected true or false", value);
            return -1;
        }
    } else if (strcasecmp(label, "time") == 0) {
        conf_error(ps->e, ps->file, line, "time=%s: not supported: the rest of the "
                   "day's requests would take another route without a word", value);
        return -1;
    } else {
        return 0;
    }
    return 1;
}

/* A small integer label.  1 taken, -1 error. */
static int
pp_int(struct pp_parse *ps, const char *label, const char *value, int lo, int hi,
       int *out, int line)
{
    char *end;
    long v = strtol(value, &end, 10);

    if (*end != '\0' || end == value || v < lo || v > hi) {
        conf_error(ps->e, ps->file, line, "%s=%s: expected %d to %d", label, value, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 1;
}

static const struct {
    const char *name;
    enum conf_pp_rr rr;
} pp_rr_names[] = {
    { "false", CONF_PP_RR_FALSE }, { "true", CONF_PP_RR_TRUE },
    { "strict", CONF_PP_RR_STRICT }, { "consistent_hash", CONF_PP_RR_HASH },
    { "latched", CONF_PP_RR_LATCHED },
};

/* An action: 1 taken, 0 not one, -1 error recorded.  seen[] holds the
 * labels given so far (a repeat is an error, -2). */
static int
pp_action(struct pp_parse *ps, struct conf_parent_rule *r, const char *label,
          char *value, int line, int *flags)
{
    static const char *const names[] = {
        "parent", "secondary_parent", "round_robin", "go_direct", "parent_is_proxy",
        "qstring", "parent_retry", "simple_server_retry_responses",
        "unavailable_server_retry_responses", "max_simple_retries",
        "max_unavailable_server_retries", "secondary_mode", "ignore_self_detect",
        "host_override", "hash_algorithm", "primary_parent",
    };
    int k = -1, b;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(label, names[i]) == 0)
            k = (int)i;
    if (k < 0)
        return 0;
    if (k == 15)
        k = 0;          /* primary_parent: ATS's other name of parent */
    if (*flags & (1 << k))
        return -2;
    *flags |= 1 << k;
    switch (k) {
    case 0:
        return pp_hosts(ps, r, "parent", value, line, &r->nprimary) < 0 ? -1 : 1;
    case 1:
        if (!r->nprimary) {
            conf_error(ps->e, ps->file, line, "secondary_parent= before parent=");
            return -1;
        }
        return pp_hosts(ps, r, "secondary_parent", value, line, &r->nsecondary) < 0 ? -1 : 1;
    case 2:
        for (size_t i = 0; i < sizeof(pp_rr_names) / sizeof(pp_rr_names[0]); i++)
            if (strcasecmp(value, pp_rr_names[i].name) == 0) {
                r->rr = pp_rr_names[i].rr;
                return 1;
            }
        conf_error(ps->e, ps->file, line, "round_robin=%s: expected true, strict, "
                   "false, consistent_hash or latched", value);
        return -1;
    case 3:
    case 4:
        if (pp_bool(value, k == 3 ? &r->go_direct : &r->is_proxy) < 0) {
            conf_error(ps->e, ps->file, line, "%s=%s: expected true or false", label, value);
            return -1;
        }
        return 1;
    case 5:
        if (strcasecmp(value, "ignore") == 0)
            r->ignore_query = 1;
        else if (strcasecmp(value, "consider") != 0) {
            conf_error(ps->e, ps->file, line, "qstring=%s: expected consider or ignore", value);
            return -1;
        }
        return 1;
    case 6:
        r->retry = strcasecmp(value, "simple_retry") == 0 ? CONF_PP_RETRY_SIMPLE
                 : strcasecmp(value, "unavailable_server_retry") == 0 ? CONF_PP_RETRY_UNAVAIL
                 : strcasecmp(value, "both") == 0 ? CONF_PP_RETRY_SIMPLE | CONF_PP_RETRY_UNAVAIL
                 : 0;
        if (r->retry == 0) {
            conf_error(ps->e, ps->file, line, "parent_retry=%s: expected simple_retry, "
                       "unavailable_server_retry or both", value);
            return -1;
        }
        return 1;
    case 7:
    case 8:
        if (pp_codes(value, k == 7 ? r->simple_codes : r->unavail_codes, k == 7 ? 400 : 500) < 0) {
            conf_error(ps->e, ps->file, line, "%s=%s: expected a list of %s status codes",
                       label, value, k == 7 ? "4xx or 5xx" : "5xx");
            return -1;
        }
        return 1;
    case 9:
        return pp_int(ps, label, value, 1, 5, &r->max_simple, line);
    case 10:
        return pp_int(ps, label, value, 1, 5, &r->max_unavail, line);
    case 11:
        return pp_int(ps, label, value, 1, 3, &r->secondary_mode, line);
    case 12:
    case 13:
        if (pp_bool(value, &b) < 0 || b) {
            conf_error(ps->e, ps->file, line, "%s=%s: only false is supported", label, value);
            return -1;
        }
        return 1;
    default:
        if (strcasecmp(value, "siphash24") != 0 && strcasecmp(value, "siphash13") != 0) {
            conf_error(ps->e, ps->file, line, "hash_algorithm=%s: expected siphash24 "
                       "or siphash13", value);
            return -1;
        }
        return 1;   /* either way: Cistern's ring is its own (cistern.8) */
    }
}

static void
pp_rule_free(struct conf_parent_rule *r)
{
    free(r->domain);
    if (r->re_ok)
        regfree(&r->re);
    conf_ip_allow_free(&r->ip);
    conf_ip_allow_free(&r->src);
    free(r->prefix);
    free(r->suffix);
    free(r->scheme);
    free(r->method);
    free(r->hosts);
    memset(r, 0, sizeof(*r));
}

/* The line's fields, read; 0, or -1 after an error was recorded. */
static int
pp_fields(struct pp_parse *ps, struct conf_parent_rule *r, char *line, int lineno)
{
    char *cur = line, *label, *value;
    const char *why = NULL;
    int rc, flags = 0;

    while ((rc = conf_pair(&cur, &label, &value, &why)) != 0) {
        if (rc < 0) {
            conf_error(ps->e, ps->file, lineno, "%s", why);
            return -1;
        }
        if (strcasecmp(label, "dest_domain") == 0 || strcasecmp(label, "dest_host") == 0
            || strcasecmp(label, "dest_ip") == 0 || strcasecmp(label, "host_regex") == 0
            || strcasecmp(label, "url_regex") == 0) {
            rc = pp_primary(ps, r, label, value, lineno) < 0 ? -1 : 1;
        } else if ((rc = pp_action(ps, r, label, value, lineno, &flags)) == 0
                   && (rc = pp_secondary(ps, r, label, value, lineno)) == 0) {
            conf_error(ps->e, ps->file, lineno, "unknown label \"%s\"", label);
            return -1;
        }
        if (rc == -2)
            conf_error(ps->e, ps->file, lineno, "%s= given twice", label);
        if (rc < 0)
            return -1;
    }
    if (r->primary == 0) {
        conf_error(ps->e, ps->file, lineno, "no primary destination (dest_domain=, "
                   "dest_host=, dest_ip=, host_regex= or url_regex=)");
        return -1;
    }
    if (r->nprimary == 0 && !(flags & (1 << 3))) {
        conf_error(ps->e, ps->file, lineno, "every line needs parent= or go_direct=");
        return -1;
    }
    if (r->nprimary == 0 && !r->go_direct) {
        conf_error(ps->e, ps->file, lineno, "go_direct=false without parent=: no "
                   "request it matches could be served");
        return -1;
    }
    if (!r->is_proxy)
        r->go_direct = 0;       /* ATS: ignored when the parents are origins */
    return 0;
}

static int
pp_line(void *arg, char *line, int lineno)
{
    struct pp_parse *ps = arg;
    struct conf_parent_rule r;

    memset(&r, 0, sizeof(r));
    r.internal = -1;
    r.go_direct = 1;
    r.is_proxy = 1;
    r.max_simple = r.max_unavail = 1;
    r.secondary_mode = 1;
    r.line = lineno;
    pp_codes("404", r.simple_codes, 400);
    pp_codes("503", r.unavail_codes, 500);
    if (pp_fields(ps, &r, line, lineno) < 0) {
        pp_rule_free(&r);
        return 0;
    }
    if (r.internal == 1)
        conf_note(ps->e, CONF_NOTE_MATCHES, ps->file, lineno, "internal=true: "
                  "Cistern has no internal requests, the line never matches");
    else
        conf_note(ps->e, CONF_NOTE_USED, ps->file, lineno, "parent.config rule "
                  "(%d parent%s)", r.nprimary + r.nsecondary,
                  r.nprimary + r.nsecondary == 1 ? "" : "s");
    struct conf_parent_rule *nr = realloc(ps->pp->rules,
                                          sizeof(*nr) * (size_t)(ps->pp->nrules + 1));
    if (nr == NULL) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        pp_rule_free(&r);
        return -1;
    }
    ps->pp->rules = nr;
    nr[ps->pp->nrules++] = r;
    return 0;
}

int
conf_parent_parse(struct conf_parents *pp, const char *file, struct conf_errors *e)
{
    struct pp_parse ps = { .pp = pp, .file = file, .e = e };
    int n0 = e->n;

    if (conf_foreach_line(file, e, pp_line, &ps) < 0)
        return -1;
    if (pp->nrules == 0 && e->n == n0)
        conf_note(e, CONF_NOTE_MATCHES, file, 0, "empty: no parent proxies");
    return e->n == n0 ? 0 : -1;
}

void
conf_parent_free(struct conf_parents *pp)
{
    for (int i = 0; i < pp->nrules; i++)
        pp_rule_free(&pp->rules[i]);
    free(pp->rules);
    memset(pp, 0, sizeof(*pp));
}

/* ------------------------------------------------------------------ */

static int
pp_suffix_matches(const char *list, const char *path, size_t pathlen)
{
    const char *p = list;

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
pp_ip_matches(const struct conf_parent_rule *r, const char *host, size_t hostlen)
{
    char h[64];
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

    if (hostlen >= sizeof(h))
        return 0;
    if (hostlen > 2 && host[0] == '[') {
        host++;
        hostlen -= 2;
    }
    memcpy(h, host, hostlen);
    h[hostlen] = '\0';
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, h, &s4->sin_addr) == 1)
        s4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, h, &s6->sin6_addr) == 1)
        s6->sin6_family = AF_INET6;
    else
        return 0;
    return conf_ip_allowed(&r->ip, (struct sockaddr *)&ss, CONF_METHOD_GET);
}

static int
pp_primary_matches(const struct conf_parent_rule *r, const struct conf_parent_req *q)
{
    size_t hl = q->hostlen;
    char h[256];

    if (r->primary == CONF_PP_DOMAIN || r->primary == CONF_PP_HOST)
        while (hl > 0 && q->host[hl - 1] == '.')
            hl--;       /* "example.com." is example.com (ATS's HostMatcher) */
    switch (r->primary) {
    case CONF_PP_DOMAIN:
        if (r->domainlen == 0)
            return 1;
        return (hl == r->domainlen
                || (hl > r->domainlen && q->host[hl - r->domainlen - 1] == '.'))
               && strncasecmp(q->host + hl - r->domainlen, r->domain, r->domainlen) == 0;
    case CONF_PP_HOST:
        return hl == r->domainlen && strncasecmp(q->host, r->domain, hl) == 0;
    case CONF_PP_IP:
        return pp_ip_matches(r, q->host, hl);
    case CONF_PP_HOST_REGEX:
        if (hl >= sizeof(h))
            return 0;
        memcpy(h, q->host, hl);
        h[hl] = '\0';
        return regexec(&r->re, h, 0, NULL, 0) == 0;
    case CONF_PP_URL_REGEX:
        return q->url != NULL && regexec(&r->re, q->url, 0, NULL, 0) == 0;
    }
    return 0;
}

static int
pp_matches(const struct conf_parent_rule *r, const struct conf_parent_req *q)
{
    size_t plen = q->pathlen;
    const char *qm = memchr(q->path, '?', q->pathlen);

    if (qm)
        plen = (size_t)(qm - q->path);
    if (!pp_primary_matches(r, q))
        return 0;
    if (r->prefix && (plen < r->prefixlen || memcmp(q->path, r->prefix, r->prefixlen) != 0))
        return 0;
    if (r->suffix && !pp_suffix_matches(r->suffix, q->path, plen))
        return 0;
    if (r->port_lo && (q->port < r->port_lo || q->port > r->port_hi))
        return 0;
    if (r->scheme && strcasecmp(r->scheme, q->scheme) != 0)
        return 0;
    if (r->method && (q->method == NULL || strcasecmp(r->method, q->method) != 0))
        return 0;
    if (r->src.nrules && (q->src == NULL || !conf_ip_allowed(&r->src, q->src, CONF_METHOD_GET)))
        return 0;
    return r->internal != 1;    /* no request of ours is internal */
}

const struct conf_parent_rule *
conf_parent_find(const struct conf_parents *pp, const struct conf_parent_req *q)
{
    for (int i = 0; i < pp->nrules; i++)
        if (pp_matches(&pp->rules[i], q))
            return &pp->rules[i];
    return NULL;
}
