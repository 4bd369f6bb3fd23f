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

/* A selector label (conf/selector.c): 1 taken, 0 not one, -1 error
 * recorded, -2 given twice.  time= is refused: a rule that holds only part
 * of the day would route the rest elsewhere without saying. */
static int
pp_selector(struct pp_parse *ps, struct conf_parent_rule *r, const char *label,
            const char *value, int line)
{
    int rc;

    if (strcasecmp(label, "time") == 0) {
        conf_error(ps->e, ps->file, line, "time=%s: not supported: the rest of the "
                   "day's requests would take another route without a word", value);
        return -1;
    }
    rc = conf_sel_parse(&r->sel, &conf_sel_parent, label, value, ps->file, line, ps->e);
    if (rc == 1 && r->sel.primary == CONF_SEL_URL_REGEX)
        ps->pp->need_url = 1;
    return rc;
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
    conf_sel_free(&r->sel);
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
        if (conf_sel_is_primary(label)) {
            rc = pp_selector(ps, r, label, value, lineno);
        } else if ((rc = pp_action(ps, r, label, value, lineno, &flags)) == 0
                   && (rc = pp_selector(ps, r, label, value, lineno)) == 0) {
            conf_error(ps->e, ps->file, lineno, "unknown label \"%s\"", label);
            return -1;
        }
        if (rc == -2)
            conf_error(ps->e, ps->file, lineno, "%s= given twice", label);
        if (rc < 0)
            return -1;
    }
    if (r->sel.primary == 0) {
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
    conf_sel_init(&r.sel);
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
    if (r.sel.internal == 1)
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

const struct conf_parent_rule *
conf_parent_find(const struct conf_parents *pp, const struct conf_parent_req *q)
{
    const struct conf_sel_req sq = {
        .scheme = q->scheme, .host = q->host, .hostlen = q->hostlen, .port = q->port,
        .path = q->path, .pathlen = q->pathlen, .url = q->url, .method = q->method,
        .src = q->src, .tod = -1,
    };

    for (int i = 0; i < pp->nrules; i++)
        if (conf_sel_match(&pp->rules[i].sel, &conf_sel_parent, &sq))
            return &pp->rules[i];
    return NULL;
}
