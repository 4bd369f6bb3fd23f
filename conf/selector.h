/*
 * conf/selector.h: ATS's selector grammar, the part of a cache.config or
 * parent.config line that says which requests the line is about
 * (conf/selector.c).
 *
 *   primary     dest_domain= (the host or a subdomain of it; "." every
 *               host), dest_host= (that host only), dest_ip= (an IP
 *               literal host: addresses, ranges, CIDRs), host_regex=,
 *               url_regex= (POSIX extended, searched unanchored as ATS's
 *               PCRE ones are);
 *   secondary   prefix=, suffix= (comma list, any case), port= (N or N-M),
 *               scheme=, method=, time= (HH:MM[:SS]-HH:MM[:SS], local),
 *               src_ip= (addresses, ranges, CIDRs), internal=true|false.
 *
 * A file refuses what it does not take (cache.config: dest_ip=;
 * parent.config: time=) before it hands a label here, with its own words.
 * The few places where the two files' grammars differ are a dialect.
 */
#include "conf/conf.h"      /* outside the guard: conf.h includes us */

#ifndef CISTERN_CONF_SELECTOR_H
#define CISTERN_CONF_SELECTOR_H

#include <regex.h>
#include <stddef.h>
#include <sys/socket.h>

struct conf_errors;

enum conf_sel_primary {
    CONF_SEL_DOMAIN = 1,              /* dest_domain= (and its subdomains; "." all) */
    CONF_SEL_HOST,                    /* dest_host= (that name only) */
    CONF_SEL_IP,                      /* dest_ip= (an IP literal host) */
    CONF_SEL_HOST_REGEX,              /* host_regex= */
    CONF_SEL_URL_REGEX,               /* url_regex= */
};

struct conf_selector {
    enum conf_sel_primary primary;    /* 0: none given yet */
    char    *domain;                  /* dest_domain / dest_host, lowercase,
                                         without trailing dots ("" for
                                         dest_domain=.: every host) */
    size_t   domainlen;
    regex_t  re;                      /* host_regex / url_regex */
    int      re_ok;
    struct conf_ip_allow ip;          /* dest_ip= */
    /* secondary specifiers: unset ones match everything */
    char    *prefix;                  /* "/" + the value's path */
    size_t   prefixlen;
    char    *suffix;                  /* comma list, as written */
    int      port_lo, port_hi;        /* 0: any */
    char    *scheme, *method;
    int      tod_lo, tod_hi;          /* time=: seconds of the day, -1: any */
    struct conf_ip_allow src;         /* src_ip=: nrules 0: any */
    int      internal;                /* internal=: -1 any, 0 false, 1 true */
};

/* Where cache.config and parent.config read the grammar differently. */
struct conf_sel_dialect {
    unsigned host_lead_dots:1;        /* dest_host= drops leading dots as
                                         dest_domain= does (cache.config) */
    unsigned suffix_star:1;           /* suffix=* is every path (cache.config) */
    unsigned bool_digits:1;           /* internal= takes 1 and 0 (parent.config) */
    unsigned empty_host:1;            /* dest_domain=. matches an empty host
                                         too (parent.config) */
};
extern const struct conf_sel_dialect conf_sel_cache, conf_sel_parent;

/* What is matched: the request after remap. */
struct conf_sel_req {
    const char *scheme, *host;        /* host as in the target, any case */
    size_t   hostlen;
    int      port;
    const char *path;                 /* from '/', the query included */
    size_t   pathlen;
    const char *url;                  /* "scheme://host[:port]/path?q", when a
                                         url_regex= rule needs it */
    const char *method;
    const struct sockaddr *src;       /* the client */
    int      tod;                     /* local time of day, seconds */
};

/* An empty selector (matches nothing until it has a primary). */
void conf_sel_init(struct conf_selector *s);
/* Is label one of the primary destinations? */
int  conf_sel_is_primary(const char *label);
/* Take label=value into s: 1 taken, 0 not a selector label (nothing
 * recorded), -1 an error recorded with file:line, -2 a secondary given
 * twice (not recorded: each file words that itself). */
int  conf_sel_parse(struct conf_selector *s, const struct conf_sel_dialect *d,
                    const char *label, const char *value, const char *file, int line,
                    struct conf_errors *e);
/* Does q match s (primary and every secondary)? */
int  conf_sel_match(const struct conf_selector *s, const struct conf_sel_dialect *d,
                    const struct conf_sel_req *q);
void conf_sel_free(struct conf_selector *s);

#endif /* CISTERN_CONF_SELECTOR_H */
