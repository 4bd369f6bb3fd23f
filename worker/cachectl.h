/*
 * worker/cachectl.h: HTTP caching rules (RFC 9111) as pure functions.
 *
 * Everything here reads parsed heads (struct http_req, used for responses
 * too) and numbers; nothing touches the store or the network, so every
 * rule is unit-testable (t/unit/check_cachectl.c).  worker/store.c asks:
 *   - may this response be stored?   cachectl_storable_resp() (proxy.c
 *     has decided the request's part: a GET without no-store), the whole
 *     question being cachectl_storable();
 *   - for how long is it fresh?      cachectl_lifetime(), with
 *     cachectl_initial_age() for how old it already is.
 * Whether a stored response may serve a request now is store.c's (its
 * lookup compares the age with the expiry these give).
 */
#ifndef CISTERN_CACHECTL_H
#define CISTERN_CACHECTL_H

#include <stdint.h>
#include <time.h>

#include "worker/http.h"

/* Response directives (RFC 9111 5.2.2).  Deltas are -1 when absent. */
struct cc_resp {
    unsigned no_store:1, no_cache:1, private_:1, public_:1,
             must_revalidate:1, proxy_revalidate:1, immutable:1,
             no_transform:1, invalid:1, must_understand:1,
             part_ok:1;    /* set by the caller: a 206 may be stored (a part) */
    int64_t  max_age, s_maxage;
    /* fields listed by no-cache="..." and private="...": never stored */
    const char *omit_fields, *omit_fields2;
    size_t   omit_len, omit_len2;
    int64_t  stale_while_revalidate, stale_if_error;
};

/* Request directives (RFC 9111 5.2.1). */
struct cc_req {
    unsigned no_store:1, no_cache:1, only_if_cached:1, max_stale_any:1;
    int64_t  max_age, max_stale, min_fresh;
};

/* Parse every Cache-Control field of r (names case-insensitive, values
 * token or quoted-string; a malformed delta makes the directive count as
 * invalid, which for max-age means "stale", RFC 9111 4.2.1).  With cdn
 * set, a CDN-Cache-Control field (RFC 9213) is read instead when present. */
void cachectl_parse_resp(const struct http_req *r, struct cc_resp *cc, int cdn);
/* Also honours `Pragma: no-cache` when there is no Cache-Control. */
void cachectl_parse_req(const struct http_req *r, struct cc_req *cc);

/* Parse an HTTP-date (IMF-fixdate, obsolete RFC 850 and asctime forms,
 * RFC 9110 5.6.7; the day must exist in its month and year).  Returns the
 * time, or -1 when invalid; a valid date before 1970 is 0.  An RFC 850
 * two-digit year is the latest year ending in those digits that is not
 * more than 50 years after now: cachectl_date_at takes now,
 * cachectl_date reads the clock. */
time_t cachectl_date(const char *p, size_t n);
time_t cachectl_date_at(const char *p, size_t n, time_t now);
/* Format an IMF-fixdate (29 characters) into out[32]: buf.h's
 * fmt_http_date, under the name store.c and the fuzz target know. */
void   cachectl_fmt_date(time_t t, char out[32]);

/* Value of the first field of that name (an id, http.h) as a date, or -1. */
time_t cachectl_field_date(const struct http_req *r, enum http_fid id);

/* Freshness lifetime in seconds (RFC 9111 4.2.1): s-maxage, max-age,
 * Expires - Date (invalid Expires: 0), else heuristic per
 * required_headers (0: none needed, heuristic or a default of
 * heuristic_min; 1: Last-Modified suffices; 2: explicit only): lm_milli
 * thousandths (heuristic_lm_factor; ATS's default 0.10 is 100) of
 * (Date - Last-Modified) clamped to [hmin, hmax].  Returns -1 when the
 * response has no usable freshness under those rules. */
int64_t cachectl_lifetime(const struct http_req *resp, const struct cc_resp *cc,
                          time_t response_time, int required_headers,
                          int64_t hmin, int64_t hmax, int lm_milli);

/* Corrected initial age (RFC 9111 4.2.3) at the time of storing. */
int64_t cachectl_initial_age(const struct http_req *resp, time_t request_time,
                             time_t response_time);

/* May this response (resp, its directives cc, its lifetime from
 * cachectl_lifetime) be stored (RFC 9111 3), for a GET without no-store,
 * with Authorization when req_auth (3.5)?  Returns NULL when yes, else
 * the reason as a Cache-Status detail: "must-understand", "no-store",
 * "private", "status", "authorization", "vary-star" (on any Vary line),
 * "no-freshness", "stale-on-arrival" (lifetime 0, nothing to validate
 * with).  Configuration-dependent refusals (Set-Cookie, sizes) and what
 * the store cannot key are store.c's. */
const char *cachectl_storable_resp(const struct http_req *resp, const struct cc_resp *cc,
                                   int64_t lifetime, int req_auth);

/* The whole question, the request's part included: "method" (only a GET
 * is stored), "request-no-store" (5.2.1.5), then cachectl_storable_resp
 * with the request's Authorization. */
const char *cachectl_storable(const struct http_req *req, const struct cc_req *rcc,
                              const struct http_req *resp, const struct cc_resp *cc,
                              int64_t lifetime);

/* Status codes whose caching rules we implement (for must-understand). */
int cachectl_status_understood(int status);

/* Cacheable by default (RFC 9110 15.1). */
int cachectl_status_heuristic(int status);

#endif /* CISTERN_CACHECTL_H */
