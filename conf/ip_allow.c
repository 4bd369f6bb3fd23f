/*
 * conf/ip_allow.c: ip_allow.yaml (ATS 9+) and ip_allow.config (ATS 8): who
 * may send which methods, and to which origin addresses Cistern may send
 * them.
 *
 * ip_allow.yaml (read with conf/yaml.c):
 *     ip_allow:                      # a sequence of rules, or one rule
 *       - apply: in | out            # the client's / the origin's address
 *         ip_addrs: RANGE | [RANGE, ...]
 *         action: allow | deny       # ATS 10's set_allow / set_deny too
 *         methods: ALL | M | [M, ...]   # optional, default ALL
 * Every key of a rule is checked: an unknown one, ATS 10's ip_categories
 * (here or at the top) and any other top-level key are errors, since a rule
 * read without them would allow what the operator meant to deny.
 * ip_allow.config, keys in any order:
 *     src_ip=RANGE | dest_ip=RANGE  action=ip_allow|ip_deny [method=M1|M2|...|ALL]
 * dest_ip= lines are the out rules.  RANGE is one address, "lo-hi", or a
 * CIDR block, IPv4 or IPv6; "0/0" (ATS's stock file) is 0.0.0.0/0, since
 * ATS reads an IPv4 address written as one number as inet_aton() does.
 *
 * Decision, exactly ATS's (IpAllow.cc fills an address map, first rule
 * first): the first rule whose range holds the address decides, whatever
 * the method.  An allow rule allows the methods it lists and denies the
 * others; a deny rule denies the methods it lists and allows the others.
 * So "deny PURGE from 0/0" lets GET through, and a later rule for the same
 * addresses is never consulted: a rule whose addresses earlier rules all
 * hold is an error (a warning when it allows everything), since what it
 * says is not what happens.  Methods without a bit of their own are
 * matched by name.  In rules: an address no rule holds is denied.  Out
 * rules: an address no rule holds is allowed (ATS: "default is fail open"),
 * and with no out rules at all the check costs nothing.
 *
 * Ranges are stored as inclusive [lo, hi] byte strings in network order
 * (4 bytes for IPv4, 16 for IPv6), so containment is two memcmp()s.
 * IPv4-mapped IPv6 addresses (::ffff:a.b.c.d, as a dual-stack socket reports
 * them) are checked against the IPv4 rules.
 *
 * The built-in defaults (used when neither file exists) are parsed from
 * ip_allow_default_text, the same rules the shipped file carries.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "conf/conf.h"
#include "conf/yaml.h"

static const char ip_allow_default_text[] =
    "src_ip=127.0.0.1 action=ip_allow method=ALL\n"
    "src_ip=::1 action=ip_allow method=ALL\n"
    "src_ip=0.0.0.0-255.255.255.255 action=ip_deny method=PUSH|PURGE|DELETE\n"
    "src_ip=::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff action=ip_deny "
    "method=PUSH|PURGE|DELETE\n";

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

/* RFC 9110 5.6.2's tchar, without '|': ip_allow.config's separator */
static int
ip_method_char(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z')
           || (ch >= '0' && ch <= '9') || (ch != '\0' && strchr("!#$%&'*+-.^_`~", ch));
}

int
conf_method_name_ok(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!ip_method_char((unsigned char)name[i]))
            return 0;
    return len > 0;
}

/* ---------------------------------------------------------------------
 * Addresses
 */

/* Parse one address; returns its family, or 0. */
static int
ip_parse_addr(const char *s, uint8_t out[16])
{
    char          *end;
    unsigned long  v;

    memset(out, 0, 16);
    if (strchr(s, ':') != NULL)
        return inet_pton(AF_INET6, s, out) == 1 ? AF_INET6 : 0;
    if (inet_pton(AF_INET, s, out) == 1)
        return AF_INET;
    /* One decimal number is a whole IPv4 address, as ATS (inet_aton)
     * reads it: "0/0" in ATS's stock ip_allow.yaml.  inet_aton's dotted
     * short forms stay refused: it reads "192.168.1/24" as 192.168.0.1/24,
     * which nobody means. */
    if (s[0] < '0' || s[0] > '9')
        return 0;
    v = strtoul(s, &end, 10);
    if (*end != '\0' || v > 0xffffffffUL || strlen(s) > 10)
        return 0;
    out[0] = (uint8_t)(v >> 24);
    out[1] = (uint8_t)(v >> 16);
    out[2] = (uint8_t)(v >> 8);
    out[3] = (uint8_t)v;
    return AF_INET;
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
 * Rules
 */

/* Append a copy of rule (its names copied too) to *list.  Returns 0, or -1
 * out of memory. */
static int
ip_rule_add(struct conf_ip_rule **list, int *n, const struct conf_ip_rule *rule)
{
    struct conf_ip_rule *nl, *r;

    nl = realloc(*list, sizeof(*nl) * (size_t)(*n + 1));
    if (nl == NULL)
        return -1;
    *list = nl;
    r = &nl[*n];
    *r = *rule;
    r->names = NULL;
    r->nnames = 0;
    if (rule->nnames > 0) {
        r->names = calloc((size_t)rule->nnames, sizeof(*r->names));
        if (r->names == NULL)
            return -1;
        for (int i = 0; i < rule->nnames; i++) {
            if ((r->names[i] = strdup(rule->names[i])) == NULL) {
                r->nnames = i;
                (*n)++;             /* so the free finds what was copied */
                return -1;
            }
        }
        r->nnames = rule->nnames;
    }
    (*n)++;
    return 0;
}

static void
ip_rules_free(struct conf_ip_rule *list, int n)
{
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < list[i].nnames; j++)
            free(list[i].names[j]);
        free(list[i].names);
    }
    free(list);
}

/* Add one method (name, len) to rule: its bit, ALL, or its name.  Names
 * point into the caller's text until ip_rule_add() copies them.  Returns
 * 0, or -1 with *why: a name that is no method ("PURGE, DELETE": a list
 * written as one name, which no request would match, so a deny rule would
 * deny nothing), or one name too many. */
static int
ip_rule_method(struct conf_ip_rule *rule, const char *name, size_t len,
               const char **namebuf, int namecap, const char **why)
{
    unsigned b;

    if (!conf_method_name_ok(name, len)) {
        *why = "is not a method name";
        return -1;
    }
    if (len == 3 && strncasecmp(name, "ALL", 3) == 0) {
        rule->methods = CONF_METHOD_ALL;
        return 0;
    }
    b = conf_method_bit(name, len);
    if (b != CONF_METHOD_OTHER) {
        rule->methods |= b;
        return 0;
    }
    if (rule->nnames >= namecap) {
        *why = "is one non-standard method too many";
        return -1;
    }
    namebuf[rule->nnames++] = name;
    return 0;
}

/* One parse of either file. */
#define IP_MAX_NAMES 32             /* named methods in one rule */

struct ip_parse {
    struct conf_ip_allow *ia;
    const char           *file;
    struct conf_errors   *e;
};

/* ---------------------------------------------------------------------
 * Rules that never apply
 */

/* Are a and b ranges of one rule (its line, action and methods)? */
static int
ip_same_rule(const struct conf_ip_rule *a, const struct conf_ip_rule *b)
{
    if (a->line != b->line || a->allow != b->allow || a->methods != b->methods
        || a->nnames != b->nnames)
        return 0;
    for (int i = 0; i < a->nnames; i++)
        if (strcmp(a->names[i], b->names[i]) != 0)
            return 0;
    return 1;
}

/* Do the ranges of list[0..upto) of other rules than r's hold all of r's
 * range?  (A rule's own ranges overlapping say the same thing twice.)
 * Sets *by to the line of the first that holds its start. */
static int
ip_range_covered(const struct conf_ip_rule *list, int upto,
                 const struct conf_ip_rule *r, int *by)
{
    size_t  alen = r->range.family == AF_INET ? 4 : 16;
    uint8_t cur[16];

    memcpy(cur, r->range.lo, alen);
    *by = 0;
    for (;;) {
        const struct conf_ip_range *reach = NULL;

        /* of the earlier ranges holding cur, the one reaching furthest */
        for (int j = 0; j < upto; j++) {
            const struct conf_ip_range *e = &list[j].range;

            if (ip_same_rule(&list[j], r) || e->family != r->range.family
                || memcmp(e->lo, cur, alen) > 0 || memcmp(cur, e->hi, alen) > 0)
                continue;
            if (reach == NULL || memcmp(e->hi, reach->hi, alen) > 0)
                reach = e;
            if (*by == 0)
                *by = list[j].line;
        }
        if (reach == NULL)
            return 0;
        if (memcmp(reach->hi, r->range.hi, alen) >= 0)
            return 1;
        /* on past it: reach->hi < r's end, so this cannot wrap */
        memcpy(cur, reach->hi, alen);
        for (size_t i = alen; i-- > 0 && ++cur[i] == 0;)
            ;
    }
}

/* The first rule holding an address decides, whatever the method (ATS),
 * so a rule whose addresses earlier rules all hold is never consulted: an
 * error when it would deny something (its restriction would silently not
 * be), a warning when it allows every method. */
static void
ip_dead_rules(struct ip_parse *ps, const struct conf_ip_rule *list, int n)
{
    for (int i = 1; i < n; i++) {
        const struct conf_ip_rule *r = &list[i];
        char lo[INET6_ADDRSTRLEN], hi[INET6_ADDRSTRLEN], what[2 * INET6_ADDRSTRLEN + 2];
        int  by;

        if (!ip_range_covered(list, i, r, &by))
            continue;
        inet_ntop(r->range.family, r->range.lo, lo, sizeof(lo));
        inet_ntop(r->range.family, r->range.hi, hi, sizeof(hi));
        snprintf(what, sizeof(what), "%s%s%s", lo, strcmp(lo, hi) ? "-" : "",
                 strcmp(lo, hi) ? hi : "");
        if (r->allow && r->methods == CONF_METHOD_ALL)
            conf_warn(ps->e, ps->file, r->line, "%s: this rule never applies: "
                      "earlier rules hold all of it (line %d first), and the "
                      "first rule holding an address decides", what, by);
        else
            conf_error(ps->e, ps->file, r->line, "%s: this rule never applies: "
                       "earlier rules hold all of it (line %d first), and the "
                       "first rule holding an address decides (as in ATS), so "
                       "what it denies would not be; put it before them", what, by);
    }
}

/* Both lists of a parsed file. */
static void
ip_dead_rules_all(struct ip_parse *ps)
{
    ip_dead_rules(ps, ps->ia->rules, ps->ia->nrules);
    ip_dead_rules(ps, ps->ia->out, ps->ia->nout);
}

/* ---------------------------------------------------------------------
 * ip_allow.config
 */

/* method=M1|M2|... into rule (names are cut out of value in place).
 * Returns 0, or -1 after an error. */
static int
ip_parse_methods(struct ip_parse *ps, int line, char *value,
                 struct conf_ip_rule *rule, const char **names)
{
    char *p = value, *bar;
    const char *why;

    for (;;) {
        size_t len;

        bar = strchr(p, '|');
        len = bar != NULL ? (size_t)(bar - p) : strlen(p);
        if (len == 0) {
            conf_error(ps->e, ps->file, line, "empty method name in method=");
            return -1;
        }
        if (bar != NULL)
            *bar = '\0';
        if (ip_rule_method(rule, p, len, names, IP_MAX_NAMES, &why) < 0) {
            conf_error(ps->e, ps->file, line, "method=: \"%s\" %s (at most %d "
                       "non-standard ones, separated by |)", p, why, IP_MAX_NAMES);
            return -1;
        }
        if (bar == NULL)
            break;
        p = bar + 1;
    }
    return 0;
}

static int
ip_line(void *arg, char *line, int lineno)
{
    struct ip_parse     *ps = arg;
    struct conf_ip_rule  rule;
    const char *names[IP_MAX_NAMES], *why;
    char *p = line, *tok, *src = NULL, *dst = NULL, *action = NULL,
         *method = NULL, *range;
    int   rc;

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
        } else if (strcasecmp(tok, "dest_ip") == 0) {
            slot = &dst;
        } else if (strcasecmp(tok, "action") == 0) {
            slot = &action;
        } else if (strcasecmp(tok, "method") == 0) {
            slot = &method;
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

    memset(&rule, 0, sizeof(rule));
    rule.line = lineno;
    if (src == NULL && dst == NULL) {
        conf_error(ps->e, ps->file, lineno, "missing src_ip= (or dest_ip=)");
        return 0;
    }
    if (src != NULL && dst != NULL) {
        conf_error(ps->e, ps->file, lineno,
                   "src_ip= and dest_ip= on one line (one rule each)");
        return 0;
    }
    if (action == NULL) {
        conf_error(ps->e, ps->file, lineno, "missing action=");
        return 0;
    }
    range = src != NULL ? src : dst;
    if (ip_parse_range(range, &rule.range, &why) < 0) {
        conf_error(ps->e, ps->file, lineno, "%s \"%s\": %s",
                   src != NULL ? "src_ip" : "dest_ip", range, why);
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
    if (method == NULL)
        rule.methods = CONF_METHOD_ALL;
    else if (ip_parse_methods(ps, lineno, method, &rule, names) < 0)
        return 0;
    if (rule.methods == CONF_METHOD_ALL)
        rule.nnames = 0;            /* ALL covers every name */
    rule.names = (char **)names;

    if (src != NULL)
        rc = ip_rule_add(&ps->ia->rules, &ps->ia->nrules, &rule);
    else
        rc = ip_rule_add(&ps->ia->out, &ps->ia->nout, &rule);
    if (rc < 0) {
        conf_error(ps->e, ps->file, lineno, "out of memory");
        return -1;
    }
    return 0;
}

int
conf_ip_allow_parse(struct conf_ip_allow *ia, const char *file,
                    struct conf_errors *e)
{
    struct ip_parse ps = { .ia = ia, .file = file, .e = e };
    int             n0 = e->n;

    ia->source = "ip_allow.config";
    if (conf_foreach_line(file, e, ip_line, &ps) < 0)
        return -1;
    if (e->n == n0)
        ip_dead_rules_all(&ps);
    return e->n == n0 ? 0 : -1;
}

/* ---------------------------------------------------------------------
 * ip_allow.yaml
 */

/* *vp, a scalar or a sequence of scalars, as an array of nodes (a scalar
 * is the one-item array vp).  Returns the count, or -1 after an error. */
static int
ip_yaml_list(struct ip_parse *ps, const struct conf_yaml *const *vp,
             const char *key, const struct conf_yaml *const **items)
{
    const struct conf_yaml *v = *vp;

    if (v->kind == CONF_YAML_SCALAR) {
        *items = vp;
        return 1;
    }
    if (v->kind != CONF_YAML_SEQ) {
        conf_error(ps->e, ps->file, v->line,
                   "%s: expected a value or a sequence of values, not a %s",
                   key, conf_yaml_kind_name(v->kind));
        return -1;
    }
    for (int i = 0; i < v->nkids; i++) {
        if (v->kids[i]->kind != CONF_YAML_SCALAR) {
            conf_error(ps->e, ps->file, v->kids[i]->line,
                       "%s: expected a value, not a %s", key,
                       conf_yaml_kind_name(v->kids[i]->kind));
            return -1;
        }
    }
    *items = (const struct conf_yaml *const *)v->kids;
    return v->nkids;
}

/* The keys of one rule, checked; NULL where absent.  Returns 0, or -1
 * after an error. */
struct ip_yaml_rule {
    const struct conf_yaml *apply, *addrs, *action, *methods;
};

static int
ip_yaml_keys(struct ip_parse *ps, const struct conf_yaml *node,
             struct ip_yaml_rule *yr)
{
    int rc = 0;

    memset(yr, 0, sizeof(*yr));
    for (int i = 0; i + 1 < node->nkids; i += 2) {
        const struct conf_yaml *k = node->kids[i], *v = node->kids[i + 1];

        if (k->kind != CONF_YAML_SCALAR) {
            conf_error(ps->e, ps->file, k->line,
                       "a rule's keys are names, not a %s",
                       conf_yaml_kind_name(k->kind));
            rc = -1;
        } else if (strcmp(k->str, "apply") == 0) {
            yr->apply = v;
        } else if (strcmp(k->str, "ip_addrs") == 0) {
            yr->addrs = v;
        } else if (strcmp(k->str, "action") == 0) {
            yr->action = v;
        } else if (strcmp(k->str, "methods") == 0) {
            yr->methods = v;
        } else if (strcmp(k->str, "ip_categories") == 0) {
            conf_error(ps->e, ps->file, k->line,
                       "ip_categories (ATS 10) is not supported; this rule "
                       "could not be enforced");
            rc = -1;
        } else {
            conf_error(ps->e, ps->file, k->line,
                       "unknown key \"%s\" in a rule (expected apply, "
                       "ip_addrs, action, methods)", k->str);
            rc = -1;
        }
    }
    return rc;
}

/* apply, action and methods into rule; *out says which list.  Returns 0,
 * or -1 after an error. */
static int
ip_yaml_action(struct ip_parse *ps, const struct conf_yaml *node,
               const struct ip_yaml_rule *yr, struct conf_ip_rule *rule,
               int *out, const char **names)
{
    const struct conf_yaml *const *ms;
    const char *why;
    int nm;

    if (yr->apply == NULL || yr->action == NULL || yr->addrs == NULL) {
        conf_error(ps->e, ps->file, node->line, "a rule needs %s",
                   yr->apply == NULL ? "apply: (in or out)"
                   : yr->action == NULL ? "action: (allow or deny)"
                   : "ip_addrs:");
        return -1;
    }
    if (yr->apply->kind != CONF_YAML_SCALAR
        || (strcasecmp(yr->apply->str, "in") != 0
            && strcasecmp(yr->apply->str, "out") != 0)) {
        conf_error(ps->e, ps->file, yr->apply->line,
                   "apply: expected in or out");
        return -1;
    }
    *out = strcasecmp(yr->apply->str, "out") == 0;
    /* ATS compares the action exactly; set_allow / set_deny are ATS 10's
     * names, which ATS 10 reads with the same meaning. */
    if (yr->action->kind == CONF_YAML_SCALAR
        && (strcmp(yr->action->str, "allow") == 0
            || strcmp(yr->action->str, "set_allow") == 0)) {
        rule->allow = 1;
    } else if (yr->action->kind == CONF_YAML_SCALAR
               && (strcmp(yr->action->str, "deny") == 0
                   || strcmp(yr->action->str, "set_deny") == 0)) {
        rule->allow = 0;
    } else {
        conf_error(ps->e, ps->file, yr->action->line,
                   "action: expected allow or deny (or set_allow, set_deny)");
        return -1;
    }
    if (yr->methods == NULL) {
        rule->methods = CONF_METHOD_ALL;
        return 0;
    }
    if ((nm = ip_yaml_list(ps, &yr->methods, "methods", &ms)) < 0)
        return -1;
    for (int i = 0; i < nm; i++) {
        if (conf_yaml_is_null(ms[i])) {
            /* read as a name, it would match no request */
            conf_error(ps->e, ps->file, ms[i]->line,
                       "methods: a YAML null is no method (ATS refuses it)");
            return -1;
        }
        if (ms[i]->len == 0 || strlen(ms[i]->str) != ms[i]->len) {
            conf_error(ps->e, ps->file, ms[i]->line,
                       "methods: an empty or broken method name");
            return -1;
        }
        if (ip_rule_method(rule, ms[i]->str, ms[i]->len, names,
                           IP_MAX_NAMES, &why) < 0) {
            conf_error(ps->e, ps->file, ms[i]->line, "methods: \"%s\" %s (at "
                       "most %d non-standard ones; a list is [A, B] or one "
                       "\"- A\" line each)", ms[i]->str, why, IP_MAX_NAMES);
            return -1;
        }
    }
    if (rule->methods == CONF_METHOD_ALL)
        rule->nnames = 0;
    return 0;
}

/* One rule (a mapping): one conf_ip_rule per address range. */
static void
ip_yaml_rule(struct ip_parse *ps, const struct conf_yaml *node)
{
    struct ip_yaml_rule           yr;
    struct conf_ip_rule           rule;
    const struct conf_yaml *const *as;
    const char *names[IP_MAX_NAMES], *why;
    int out = 0, na;

    if (node->kind != CONF_YAML_MAP) {
        conf_error(ps->e, ps->file, node->line,
                   "a rule is a mapping (apply, ip_addrs, action, methods), "
                   "not a %s", conf_yaml_kind_name(node->kind));
        return;
    }
    memset(&rule, 0, sizeof(rule));
    rule.line = node->line;
    if (ip_yaml_keys(ps, node, &yr) < 0
        || ip_yaml_action(ps, node, &yr, &rule, &out, names) < 0)
        return;
    rule.names = (char **)names;
    if ((na = ip_yaml_list(ps, &yr.addrs, "ip_addrs", &as)) < 0)
        return;
    if (na == 0) {
        conf_error(ps->e, ps->file, yr.addrs->line, "ip_addrs: empty");
        return;
    }
    for (int i = 0; i < na; i++) {
        int rc;

        if (strlen(as[i]->str) != as[i]->len
            || ip_parse_range(as[i]->str, &rule.range, &why) < 0) {
            conf_error(ps->e, ps->file, as[i]->line, "ip_addrs \"%s\": %s",
                       as[i]->str, strlen(as[i]->str) != as[i]->len
                       ? "contains a NUL" : why);
            return;
        }
        if (out)
            rc = ip_rule_add(&ps->ia->out, &ps->ia->nout, &rule);
        else
            rc = ip_rule_add(&ps->ia->rules, &ps->ia->nrules, &rule);
        if (rc < 0) {
            conf_error(ps->e, ps->file, as[i]->line, "out of memory");
            return;
        }
    }
}

/* The top level: a mapping whose only key is ip_allow. */
static const struct conf_yaml *
ip_yaml_top(struct ip_parse *ps, const struct conf_yaml *root)
{
    const struct conf_yaml *rules = NULL;

    if (root == NULL) {
        conf_error(ps->e, ps->file, 0, "empty: no ip_allow rules");
        return NULL;
    }
    if (root->kind != CONF_YAML_MAP) {
        conf_error(ps->e, ps->file, root->line,
                   "the top level is a mapping with an ip_allow key, not a %s",
                   conf_yaml_kind_name(root->kind));
        return NULL;
    }
    for (int i = 0; i + 1 < root->nkids; i += 2) {
        const struct conf_yaml *k = root->kids[i];

        if (k->kind == CONF_YAML_SCALAR && strcmp(k->str, "ip_allow") == 0)
            rules = root->kids[i + 1];
        else if (k->kind == CONF_YAML_SCALAR
                 && strcmp(k->str, "ip_categories") == 0)
            conf_error(ps->e, ps->file, k->line,
                       "ip_categories (ATS 10) is not supported");
        else
            conf_error(ps->e, ps->file, k->line,
                       "unknown top-level key%s%s%s (only ip_allow is read)",
                       k->kind == CONF_YAML_SCALAR ? " \"" : "",
                       k->kind == CONF_YAML_SCALAR ? k->str : "",
                       k->kind == CONF_YAML_SCALAR ? "\"" : "");
    }
    if (rules == NULL)
        conf_error(ps->e, ps->file, root->line, "no ip_allow key");
    return rules;
}

int
conf_ip_allow_yaml_parse(struct conf_ip_allow *ia, const char *file,
                         struct conf_errors *e)
{
    struct ip_parse         ps = { .ia = ia, .file = file, .e = e };
    struct conf_yaml       *root;
    const struct conf_yaml *rules;
    int                     n0 = e->n;

    ia->source = "ip_allow.yaml";
    if (conf_yaml_load(file, e, &root) < 0)
        return -1;
    if ((rules = ip_yaml_top(&ps, root)) != NULL) {
        if (rules->kind == CONF_YAML_SEQ) {
            for (int i = 0; i < rules->nkids; i++)
                ip_yaml_rule(&ps, rules->kids[i]);
        } else if (rules->kind == CONF_YAML_MAP) {
            ip_yaml_rule(&ps, rules);       /* one rule, as ATS allows */
        } else {
            conf_error(e, file, rules->line,
                       "ip_allow: expected a sequence of rules, not a %s",
                       conf_yaml_kind_name(rules->kind));
        }
        /* ATS refuses a file without rules (and would block everyone) */
        if (e->n == n0 && ia->nrules + ia->nout == 0)
            conf_error(e, file, rules->line, "ip_allow: no rules");
        if (e->n == n0)
            ip_dead_rules_all(&ps);
    }
    conf_yaml_free(root);
    return e->n == n0 ? 0 : -1;
}

/* ---------------------------------------------------------------------
 * Defaults and release
 */
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
    ia->source = "built-in ip_allow";
}

void
conf_ip_allow_free(struct conf_ip_allow *ia)
{
    ip_rules_free(ia->rules, ia->nrules);
    ip_rules_free(ia->out, ia->nout);
    memset(ia, 0, sizeof(*ia));
}

/* ---------------------------------------------------------------------
 * Decisions
 */

/* The first rule of list whose range holds sa, or NULL. */
static const struct conf_ip_rule *
ip_match(const struct conf_ip_rule *list, int n, const struct sockaddr *sa)
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
        return NULL;
    }
    alen = family == AF_INET ? 4 : 16;

    for (int i = 0; i < n; i++) {
        const struct conf_ip_rule *r = &list[i];

        if (r->range.family == family
            && memcmp(addr, r->range.lo, alen) >= 0
            && memcmp(addr, r->range.hi, alen) <= 0)
            return r;
    }
    return NULL;
}

/* The rule's action applies to the methods it lists, the opposite to the
 * others.  name may be NULL (a CONF_METHOD_OTHER method no rule names). */
static int
ip_rule_allows(const struct conf_ip_rule *r, unsigned bit, const char *name,
               size_t len)
{
    int listed = (r->methods & bit) != 0;

    if (!listed && bit == CONF_METHOD_OTHER && name != NULL)
        for (int i = 0; i < r->nnames && !listed; i++)
            listed = strlen(r->names[i]) == len
                     && strncasecmp(r->names[i], name, len) == 0;
    return r->allow ? listed : !listed;
}

int
conf_ip_allowed(const struct conf_ip_allow *ia, const struct sockaddr *sa,
                unsigned method_bit)
{
    const struct conf_ip_rule *r = ip_match(ia->rules, ia->nrules, sa);

    return r != NULL && ip_rule_allows(r, method_bit, NULL, 0);
}

int
conf_ip_method_allowed(const struct conf_ip_allow *ia,
                       const struct sockaddr *sa, const char *method,
                       size_t mlen)
{
    const struct conf_ip_rule *r = ip_match(ia->rules, ia->nrules, sa);

    return r != NULL
           && ip_rule_allows(r, conf_method_bit(method, mlen), method, mlen);
}

int
conf_ip_out_decide(const struct conf_ip_allow *ia,
                   const struct sockaddr *sa, const char *method,
                   size_t mlen)
{
    const struct conf_ip_rule *r;

    if (ia->nout == 0)
        return -1;
    r = ip_match(ia->out, ia->nout, sa);
    if (r == NULL)
        return -1;
    return ip_rule_allows(r, conf_method_bit(method, mlen), method, mlen);
}
