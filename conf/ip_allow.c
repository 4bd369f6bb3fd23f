/*
 * conf/ip_allow.c: ip_allow.config, who may send which methods.
 *
 * ATS 8 line syntax, keys in any order:
 *     src_ip=RANGE action=ip_allow|ip_deny [method=M1|M2|...|ALL]
 * RANGE is one address, "lo-hi", or a CIDR block, IPv4 or IPv6.  ATS 8's
 * dest_ip= lines (filtering by the proxy's own address) are not supported
 * yet, and are an error: ignoring one that denies would fail open.
 *
 * Decision (conf_ip_allowed): rules are tried in file order, and the first
 * one whose range holds the client address AND whose method set holds the
 * request's method decides.  A rule that lists methods therefore says
 * nothing about the others: "deny PUSH|PURGE|DELETE from everyone" followed
 * by "allow ALL from everyone" allows GET.  An address and method no rule
 * covers is denied.
 *
 * Ranges are stored as inclusive [lo, hi] byte strings in network order
 * (4 bytes for IPv4, 16 for IPv6), so containment is two memcmp()s.
 * IPv4-mapped IPv6 clients (::ffff:a.b.c.d, as a dual-stack socket reports
 * them) are checked against the IPv4 rules.
 *
 * The built-in defaults (used when ip_allow.config is missing) are parsed
 * from ip_allow_default_text, the same rules the shipped file carries.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "conf/conf.h"

static const char ip_allow_default_text[] =
    "src_ip=127.0.0.1 action=ip_allow method=ALL\n"
    "src_ip=::1 action=ip_allow method=ALL\n"
    "src_ip=0.0.0.0-255.255.255.255 action=ip_deny method=PUSH|PURGE|DELETE\n"
    "src_ip=::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff action=ip_deny "
    "method=PUSH|PURGE|DELETE\n"
    "src_ip=0.0.0.0-255.255.255.255 action=ip_allow method=ALL\n"
    "src_ip=::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff action=ip_allow "
    "method=ALL\n";

static const struct {
    const char *name;
    unsigned    bit;
} ip_methods[] = {
    { "GET",     CONF_METHOD_GET },
    { "HEAD",    CONF_METHOD_HEAD },
    { "POST",    CONF_METHOD_POST },
    { "PUT",     CONF_METHOD_PUT },
    { "DELETE",  CONF_METHOD_DELETE },
    { "OPTIONS", CONF_METHOD_OPTIONS },
    { "TRACE",   CONF_METHOD_TRACE },
    { "CONNECT", CONF_METHOD_CONNECT },
    { "PATCH",   CONF_METHOD_PATCH },
    { "PURGE",   CONF_METHOD_PURGE },
    { "PUSH",    CONF_METHOD_PUSH },
};

unsigned
conf_method_bit(const char *name, size_t len)
{
    for (size_t i = 0; i < sizeof(ip_methods) / sizeof(ip_methods[0]); i++)
        if (strlen(ip_methods[i].name) == len
            && strncasecmp(ip_methods[i].name, name, len) == 0)
            return ip_methods[i].bit;
    return CONF_METHOD_OTHER;
}

/* ---------------------------------------------------------------------
 * Addresses
 */

/* Parse one address; returns its family, or 0. */
static int
ip_parse_addr(const char *s, uint8_t out[16])
{
    memset(out, 0, 16);
    if (strchr(s, ':') != NULL)
        return inet_pton(AF_INET6, s, out) == 1 ? AF_INET6 : 0;
    return inet_pton(AF_INET, s, out) == 1 ? AF_INET : 0;
}

/* RANGE: ADDR, ADDR-ADDR or ADDR/BITS, as written.  Returns 0, or -1 with
 * *why set. */
static int
ip_parse_range_raw(char *s, struct conf_ip_range *r, const char **why)
{
    char *sep;
    int   alen;

    memset(r, 0, sizeof(*r));
    if ((sep = strchr(s, '-')) != NULL) {
        int f2;

        *sep = '\0';
        r->family = ip_parse_addr(s, r->lo);
        f2 = ip_parse_addr(sep + 1, r->hi);
        *sep = '-';
        if (r->family == 0 || f2 == 0) {
            *why = "bad address";
            return -1;
        }
        if (r->family != f2) {
            *why = "mixes IPv4 and IPv6";
            return -1;
        }
        alen = r->family == AF_INET ? 4 : 16;
        if (memcmp(r->lo, r->hi, (size_t)alen) > 0) {
            *why = "starts after it ends";
            return -1;
        }
        return 0;
    }

    if ((sep = strchr(s, '/')) != NULL) {
        char *end;
        long  bits;

        *sep = '\0';
        r->family = ip_parse_addr(s, r->lo);
        *sep = '/';
        if (r->family == 0) {
            *why = "bad address";
            return -1;
        }
        alen = r->family == AF_INET ? 4 : 16;
        bits = strtol(sep + 1, &end, 10);
        if (sep[1] < '0' || sep[1] > '9' || *end != '\0' || bits < 0
            || bits > alen * 8) {
            *why = "bad prefix length";
            return -1;
        }
        /* Host bits in "10.1.2.3/8" are ignored, as ATS does. */
        for (int i = 0; i < alen; i++) {
            int keep = (int)bits - i * 8;
            uint8_t mask = keep >= 8 ? 0xff
                         : keep <= 0 ? 0 : (uint8_t)(0xff << (8 - keep));

            r->lo[i] &= mask;
            r->hi[i] = (uint8_t)(r->lo[i] | (uint8_t)~mask);
        }
        return 0;
    }

    r->family = ip_parse_addr(s, r->lo);
    if (r->family == 0) {
        *why = "bad address";
        return -1;
    }
    memcpy(r->hi, r->lo, 16);
    return 0;
}

/* A range written in v4-mapped form (::ffff:10.0.0.0/104) becomes the
 * IPv4 range it stands for, since clients are checked that way. */
static void
ip_unmap_range(struct conf_ip_range *r)
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                        0xff, 0xff };

    if (r->family != AF_INET6 || memcmp(r->lo, mapped, 12) != 0
        || memcmp(r->hi, mapped, 12) != 0)
        return;
    r->family = AF_INET;
    memmove(r->lo, r->lo + 12, 4);
    memmove(r->hi, r->hi + 12, 4);
    memset(r->lo + 4, 0, 12);
    memset(r->hi + 4, 0, 12);
}

/* Parse RANGE into its canonical form.  Returns 0, or -1 with *why set. */
static int
ip_parse_range(char *s, struct conf_ip_range *r, const char **why)
{
    if (ip_parse_range_raw(s, r, why) < 0)
        return -1;
    ip_unmap_range(r);
    return 0;
}

int
conf_ip_list_parse(struct conf_ip_allow *ia, const char *list, const char **why)
{
    char buf[1024], *save = NULL;

    if (strlen(list) >= sizeof(buf)) {
        *why = "list too long";
        return -1;
    }
    strcpy(buf, list);
    for (char *t = strtok_r(buf, " \t,", &save); t; t = strtok_r(NULL, " \t,", &save)) {
        struct conf_ip_rule rule;
        memset(&rule, 0, sizeof(rule));
        if (ip_parse_range(t, &rule.range, why) < 0)
            return -1;
        rule.allow = 1;
        rule.methods = CONF_METHOD_ALL;
        struct conf_ip_rule *n = realloc(ia->rules, sizeof(*n) * (size_t)(ia->nrules + 1));
        if (n == NULL) {
            *why = "out of memory";
            return -1;
        }
        ia->rules = n;
        ia->rules[ia->nrules++] = rule;
    }
    return 0;
}

/* ---------------------------------------------------------------------
 * The file
 */
struct ip_parse {
    struct conf_ip_allow *ia;
    const char           *file;
    struct conf_errors   *e;
};

/* method=M1|M2|...; returns the bit set, or 0 after an error. */
static unsigned
ip_parse_methods(struct ip_parse *ps, int line, const char *value)
{
    unsigned    bits = 0;
    const char *p = value, *bar;

    for (;;) {
        size_t len;

        bar = strchr(p, '|');
        len = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (len == 0) {
            conf_error(ps->e, ps->file, line,
                       "empty method name in \"method=%s\"", value);
            return 0;
        }
        if (len == 3 && strncasecmp(p, "ALL", 3) == 0) {
            bits |= CONF_METHOD_ALL;
        } else {
            unsigned b = conf_method_bit(p, len);

            if (b == CONF_METHOD_OTHER)
                conf_warn(ps->e, ps->file, line,
                          "unknown method \"%.*s\" (it stands for every "
                          "non-standard method)", (int)len, p);
            bits |= b;
        }
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    return bits;
}

static int
ip_line(void *arg, char *line, int lineno)
{
    struct ip_parse     *ps = arg;
    struct conf_ip_rule  rule, *nr;
    char *p = line, *tok, *src = NULL, *action = NULL, *method = NULL;
    const char *why;
    int   dest = 0;

    while ((tok = conf_token(&p)) != NULL) {
        char **slot, *eq;

        if (tok[0] == '#')
            break;
        eq = strchr(tok, '=');
        if (eq == NULL) {
            conf_error(ps->e, ps->file, lineno,
                       "\"%s\" is not key=value", tok);
            return 0;
        }
        *eq = '\0';
        if (strcasecmp(tok, "src_ip") == 0) {
            slot = &src;
        } else if (strcasecmp(tok, "action") == 0) {
            slot = &action;
        } else if (strcasecmp(tok, "method") == 0) {
            slot = &method;
        } else if (strcasecmp(tok, "dest_ip") == 0) {
            dest = 1;
            continue;
        } else {
            conf_error(ps->e, ps->file, lineno, "unknown key \"%s\"", tok);
            return 0;
        }
        if (*slot != NULL) {
            conf_error(ps->e, ps->file, lineno, "%s given twice", tok);
            return 0;
        }
        *slot = eq + 1;
    }
    if (dest) {
        /* ignoring a rule that may deny would fail open */
        conf_error(ps->e, ps->file, lineno,
                   "dest_ip rules are not supported (ignoring one could "
                   "allow what it denies)");
        return 0;
    }

    memset(&rule, 0, sizeof(rule));
    rule.line = lineno;
    if (src == NULL) {
        conf_error(ps->e, ps->file, lineno, "missing src_ip=");
        return 0;
    }
    if (action == NULL) {
        conf_error(ps->e, ps->file, lineno, "missing action=");
        return 0;
    }
    if (ip_parse_range(src, &rule.range, &why) < 0) {
        conf_error(ps->e, ps->file, lineno, "src_ip \"%s\": %s", src, why);
        return 0;
    }
    if (strcasecmp(action, "ip_allow") == 0) {
        rule.allow = 1;
    } else if (strcasecmp(action, "ip_deny") == 0) {
        rule.allow = 0;
    } else {
        conf_error(ps->e, ps->file, lineno,
                   "unknown action \"%s\" (expected ip_allow or ip_deny)",
                   action);
        return 0;
    }
    if (method == NULL) {
        rule.methods = CONF_METHOD_ALL;
    } else if ((rule.methods = ip_parse_methods(ps, lineno, method)) == 0) {
        return 0;
    }

    nr = realloc(ps->ia->rules, sizeof(*nr) * (size_t)(ps->ia->nrules + 1));
    if (nr == NULL) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        return -1;
    }
    ps->ia->rules = nr;
    ps->ia->rules[ps->ia->nrules++] = rule;
    return 0;
}

int
conf_ip_allow_parse(struct conf_ip_allow *ia, const char *file,
                    struct conf_errors *e)
{
    struct ip_parse ps = { .ia = ia, .file = file, .e = e };
    int             n0 = e->n;

    if (conf_foreach_line(file, e, ip_line, &ps) < 0)
        return -1;
    return e->n == n0 ? 0 : -1;
}

void
conf_ip_allow_defaults(struct conf_ip_allow *ia)
{
    struct conf_errors e;
    struct ip_parse    ps = { .ia = ia, .file = "(built-in ip_allow)",
                              .e = &e };

    memset(&e, 0, sizeof(e));
    conf_foreach_text_line(ip_allow_default_text, ip_line, &ps);
    /* The built-in text is part of the program: it must parse. */
    assert(e.n == 0 && e.nwarn == 0);
    conf_errors_free(&e);
}

void
conf_ip_allow_free(struct conf_ip_allow *ia)
{
    free(ia->rules);
    ia->rules = NULL;
    ia->nrules = 0;
}

/* ---------------------------------------------------------------------
 * Decisions
 */
int
conf_ip_allowed(const struct conf_ip_allow *ia, const struct sockaddr *sa,
                unsigned method_bit)
{
    uint8_t addr[16];
    int     family;
    size_t  alen;

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

        family = AF_INET;
        memcpy(addr, &s4->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            family = AF_INET;
            memcpy(addr, &s6->sin6_addr.s6_addr[12], 4);
        } else {
            family = AF_INET6;
            memcpy(addr, &s6->sin6_addr, 16);
        }
    } else {
        return 0;
    }
    alen = family == AF_INET ? 4 : 16;

    for (int i = 0; i < ia->nrules; i++) {
        const struct conf_ip_rule *r = &ia->rules[i];

        if (r->range.family != family || (r->methods & method_bit) == 0)
            continue;
        if (memcmp(addr, r->range.lo, alen) < 0
            || memcmp(addr, r->range.hi, alen) > 0)
            continue;
        return r->allow;
    }
    return 0;
}
