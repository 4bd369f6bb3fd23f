/*
 * conf/selector.c: ATS's selector grammar (selector.h), one parser and one
 * matcher for cache.config (conf/cache_config.c) and parent.config
 * (conf/parent.c).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "conf/selector.h"

const struct conf_sel_dialect conf_sel_cache = {
    .host_lead_dots = 1, .suffix_star = 1,
};
const struct conf_sel_dialect conf_sel_parent = {
    .bool_digits = 1, .empty_host = 1,
};

void
conf_sel_init(struct conf_selector *s)
{
    memset(s, 0, sizeof(*s));
    s->tod_lo = s->tod_hi = -1;
    s->internal = -1;
}

int
conf_sel_is_primary(const char *label)
{
    static const char *const names[] = {
        "dest_domain", "dest_host", "dest_ip", "host_regex", "url_regex",
    };

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcasecmp(label, names[i]) == 0)
            return 1;
    return 0;
}

/* "HH:MM[:SS]" as seconds of the day, or -1. */
static int
sel_time_of_day(const char *s)
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

/* dest_domain= / dest_host=: ATS's HostMatcher, a domain record (the host
 * and its subdomains; "." is the root, every host) or a host record (that
 * host only); trailing dots are optional on both sides. */
static int
sel_domain(struct conf_selector *s, const struct conf_sel_dialect *d, const char *label,
           const char *value, const char *file, int line, struct conf_errors *e)
{
    int dom = strcasecmp(label, "dest_domain") == 0;

    if (dom || d->host_lead_dots)
        while (*value == '.')
            value++;
    if ((s->domain = strdup(value)) == NULL)
        return -1;
    for (char *q = s->domain; *q; q++)
        *q = (char)tolower((unsigned char)*q);
    s->domainlen = strlen(s->domain);
    while (s->domainlen > 0 && s->domain[s->domainlen - 1] == '.')
        s->domain[--s->domainlen] = '\0';
    if (!dom && s->domainlen == 0) {
        conf_error(e, file, line, "%s=%s: not a host name", label, value);
        return -1;
    }
    s->primary = dom ? CONF_SEL_DOMAIN : CONF_SEL_HOST;
    return 1;
}

static int
sel_primary(struct conf_selector *s, const struct conf_sel_dialect *d, const char *label,
            const char *value, const char *file, int line, struct conf_errors *e)
{
    const char *why = NULL;

    if (s->primary) {
        conf_error(e, file, line, "%s=: a line has one primary destination", label);
        return -1;
    }
    if (strcasecmp(label, "dest_domain") == 0 || strcasecmp(label, "dest_host") == 0)
        return sel_domain(s, d, label, value, file, line, e);
    if (strcasecmp(label, "dest_ip") == 0) {
        if (conf_ip_list_parse(&s->ip, value, &why) < 0 || s->ip.nrules == 0) {
            conf_error(e, file, line, "dest_ip=%s: %s", value, why ? why : "no address");
            return -1;
        }
        s->primary = CONF_SEL_IP;
        return 1;
    }
    int host = strcasecmp(label, "host_regex") == 0;
    int rc = regcomp(&s->re, value, REG_EXTENDED | REG_NOSUB | (host ? REG_ICASE : 0));
    if (rc != 0) {
        char msg[128];
        regerror(rc, &s->re, msg, sizeof(msg));
        conf_error(e, file, line, "%s=%s: bad regular expression: %s", label, value, msg);
        return -1;
    }
    s->re_ok = 1;
    s->primary = host ? CONF_SEL_HOST_REGEX : CONF_SEL_URL_REGEX;
    return 1;
}

static int
sel_time(struct conf_selector *s, const char *value, const char *file, int line,
         struct conf_errors *e)
{
    char buf[32];
    char *dash;

    if (s->tod_lo >= 0)
        return -2;
    snprintf(buf, sizeof(buf), "%s", value);
    dash = strchr(buf, '-');
    if (dash)
        *dash = '\0';
    s->tod_lo = dash ? sel_time_of_day(buf) : -1;
    s->tod_hi = dash ? sel_time_of_day(dash + 1) : -1;
    if (s->tod_lo < 0 || s->tod_hi < 0) {
        s->tod_lo = 0;
        conf_error(e, file, line, "time=%s: expected HH:MM-HH:MM", value);
        return -1;
    }
    return 1;
}

static int
sel_internal(struct conf_selector *s, const struct conf_sel_dialect *d, const char *value,
             const char *file, int line, struct conf_errors *e)
{
    if (s->internal >= 0)
        return -2;
    if (strcasecmp(value, "true") == 0 || (d->bool_digits && strcmp(value, "1") == 0)) {
        s->internal = 1;
    } else if (strcasecmp(value, "false") == 0 || (d->bool_digits && strcmp(value, "0") == 0)) {
        s->internal = 0;
    } else {
        conf_error(e, file, line, "internal=%s: expected true or false", value);
        return -1;
    }
    return 1;
}

static int
sel_port(struct conf_selector *s, const char *value, const char *file, int line,
         struct conf_errors *e)
{
    char *end;

    if (s->port_lo)
        return -2;
    long lo = strtol(value, &end, 10), hi = lo;
    if (*end == '-')
        hi = strtol(end + 1, &end, 10);
    if (*end != '\0' || lo < 1 || hi > 65535 || hi < lo) {
        conf_error(e, file, line, "port=%s: expected a port or a range N-M", value);
        return -1;
    }
    s->port_lo = (int)lo;
    s->port_hi = (int)hi;
    return 1;
}

int
conf_sel_parse(struct conf_selector *s, const struct conf_sel_dialect *d, const char *label,
               const char *value, const char *file, int line, struct conf_errors *e)
{
    const char *why = NULL;

    if (conf_sel_is_primary(label))
        return sel_primary(s, d, label, value, file, line, e);
    if (strcasecmp(label, "prefix") == 0) {
        if (s->prefix)
            return -2;
        while (*value == '/')
            value++;
        if (asprintf(&s->prefix, "/%s", value) < 0) {
            s->prefix = NULL;
            return -1;
        }
        s->prefixlen = strlen(s->prefix);
    } else if (strcasecmp(label, "suffix") == 0) {
        if (s->suffix)
            return -2;
        s->suffix = strdup(value);
    } else if (strcasecmp(label, "port") == 0) {
        return sel_port(s, value, file, line, e);
    } else if (strcasecmp(label, "scheme") == 0) {
        if (s->scheme)
            return -2;
        if (strcasecmp(value, "http") != 0 && strcasecmp(value, "https") != 0) {
            conf_error(e, file, line, "scheme=%s: expected http or https", value);
            return -1;
        }
        s->scheme = strdup(value);
    } else if (strcasecmp(label, "method") == 0) {
        if (s->method)
            return -2;
        s->method = strdup(value);
    } else if (strcasecmp(label, "time") == 0) {
        return sel_time(s, value, file, line, e);
    } else if (strcasecmp(label, "src_ip") == 0) {
        if (s->src.nrules)
            return -2;
        if (conf_ip_list_parse(&s->src, value, &why) < 0 || s->src.nrules == 0) {
            conf_error(e, file, line, "src_ip=%s: %s", value, why ? why : "no address");
            return -1;
        }
    } else if (strcasecmp(label, "internal") == 0) {
        return sel_internal(s, d, value, file, line, e);
    } else {
        return 0;
    }
    return 1;
}

void
conf_sel_free(struct conf_selector *s)
{
    free(s->domain);
    if (s->re_ok)
        regfree(&s->re);
    conf_ip_allow_free(&s->ip);
    conf_ip_allow_free(&s->src);
    free(s->prefix);
    free(s->suffix);
    free(s->scheme);
    free(s->method);
    conf_sel_init(s);
}

/* ------------------------------------------------------------------ */
/* Matching */

static int
sel_suffix_matches(const char *list, int star, const char *path, size_t pathlen)
{
    const char *p = list;

    if (star && strcmp(list, "*") == 0)
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

/* dest_ip=: the host is an IP literal (IPv6 in brackets) in the list. */
static int
sel_ip_matches(const struct conf_selector *s, const char *host, size_t hostlen)
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
    return conf_ip_allowed(&s->ip, (struct sockaddr *)&ss, CONF_METHOD_GET);
}

static int
sel_primary_matches(const struct conf_selector *s, const struct conf_sel_dialect *d,
                    const struct conf_sel_req *q)
{
    size_t hl = q->hostlen, dl = s->domainlen;
    char h[256];

    if (s->primary == CONF_SEL_DOMAIN || s->primary == CONF_SEL_HOST)
        while (hl > 0 && q->host[hl - 1] == '.')
            hl--;       /* "example.com." is example.com (ATS's HostMatcher) */
    switch (s->primary) {
    case CONF_SEL_DOMAIN:
        if (dl == 0)
            return hl > 0 || d->empty_host;
        /* the domain itself, or a subdomain (at a label boundary) */
        return (hl == dl || (hl > dl && q->host[hl - dl - 1] == '.'))
               && strncasecmp(q->host + hl - dl, s->domain, dl) == 0;
    case CONF_SEL_HOST:
        return hl == dl && strncasecmp(q->host, s->domain, hl) == 0;
    case CONF_SEL_IP:
        return sel_ip_matches(s, q->host, hl);
    case CONF_SEL_HOST_REGEX:
        if (hl >= sizeof(h))
            return 0;
        memcpy(h, q->host, hl);
        h[hl] = '\0';
        return regexec(&s->re, h, 0, NULL, 0) == 0;
    case CONF_SEL_URL_REGEX:
        return q->url != NULL && regexec(&s->re, q->url, 0, NULL, 0) == 0;
    }
    return 0;
}

int
conf_sel_match(const struct conf_selector *s, const struct conf_sel_dialect *d,
               const struct conf_sel_req *q)
{
    size_t plen = q->pathlen;     /* prefix= and suffix= see the path alone */
    const char *qm = memchr(q->path, '?', q->pathlen);

    if (qm)
        plen = (size_t)(qm - q->path);
    if (!sel_primary_matches(s, d, q))
        return 0;
    if (s->prefix && (plen < s->prefixlen || memcmp(q->path, s->prefix, s->prefixlen) != 0))
        return 0;
    if (s->suffix && !sel_suffix_matches(s->suffix, d->suffix_star, q->path, plen))
        return 0;
    if (s->port_lo && (q->port < s->port_lo || q->port > s->port_hi))
        return 0;
    if (s->scheme && strcasecmp(s->scheme, q->scheme) != 0)
        return 0;
    if (s->method && (q->method == NULL || strcasecmp(s->method, q->method) != 0))
        return 0;
    if (s->tod_lo >= 0 && (q->tod < s->tod_lo || q->tod > s->tod_hi))
        return 0;
    if (s->src.nrules && (q->src == NULL || !conf_ip_allowed(&s->src, q->src, CONF_METHOD_GET)))
        return 0;
    return s->internal != 1;    /* no request of ours is internal */
}
