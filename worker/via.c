/*
 * worker/via.c: the Via and Server fields Cistern adds, as ATS 9 makes
 * them (proxy.config.http.insert_request_via_str, insert_response_via_str,
 * request_via_str, response_via_str, proxy_name, response_server_enabled,
 * response_server_str).
 *
 * A Via value is ATS's:
 *     PROTO NAME (STRING)                      level 1
 *     PROTO NAME (STRING [CODES])              levels 2 and 3
 * PROTO is "http/1.0" or "http/1.1" ("https/..." when that hop was TLS:
 * the client's connection for the request, the origin's for a response),
 * NAME proxy_name, STRING request_via_str or response_via_str.  ATS also
 * writes its node's UUID after NAME in a request's Via ("NAME[UUID]");
 * Cistern has no node UUID and writes none.
 *
 * The codes are ATS's "via string", 22 characters (see doc/VIA or ATS's
 * HttpTransact.h); level 2 shows the request's [u?c?] (client and cache
 * lookup) in a request and the response's [c?s?f?] (lookup, origin, fill)
 * in a response, level 3 all of it.  What Cistern fills in:
 *   u  I client sent If-Modified-Since / If-None-Match, N no-cache
 *      (Cache-Control or Pragma), C a Cookie, S otherwise
 *   c  M miss, H fresh hit, S stale (revalidated, or served stale),
 *      W served from another request's fill (collapsed), blank when the
 *      cache was not consulted
 *   s  S origin answered, N origin said 304, E origin failed, blank: not asked
 *   f  W written to the cache, U headers updated by a 304, blank: neither
 *   p  S served, N 304 to the client, R revalidated and served
 *   e  N no error
 *   detail ":t c<C><L>p s<S>": C cache consulted; L H hit, N hit
 *   answered 304, M miss, S expired; S origin connection S ok, F failed.
 * Everything is formatted into the caller's stack buffer: no allocation.
 *
 * Server (response_server_enabled): 0 adds nothing, 1 replaces the
 * origin's, 2 adds ours only when the origin sent none.  Stored objects
 * keep the origin's Server lines last in their header block (store.c), so
 * a hit drops or keeps them by looking at its last lines only.
 */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "worker/cachectl.h"
#include "worker/worker.h"

void
via_init(struct worker *w)
{
    const struct conf_records *rec = &w->conf->rec;
    const char *s = rec->server_str;

    w->server_hdr[0] = '\0';
    w->server_hdr_len = 0;
    if (rec->server_enabled == 0 || s == NULL || strcmp(s, "NULL") == 0)
        return;
    size_t n = strlen(s);
    if (n > sizeof(w->server_hdr) - 11)
        n = sizeof(w->server_hdr) - 11;
    memcpy(w->server_hdr, "Server: ", 8);
    memcpy(w->server_hdr + 8, s, n);
    memcpy(w->server_hdr + 8 + n, "\r\n", 3);
    w->server_hdr_len = n + 10;
}

void
via_codes_init(char c[VIA_CODES + 1], const struct http_req *r)
{
    struct cc_req cc;

    memcpy(c, "u c s f p eN:t c  p s ", VIA_CODES + 1);
    if (http_field_find_id(r, HTTP_F_IF_MODIFIED_SINCE, 0) >= 0
        || http_field_find_id(r, HTTP_F_IF_NONE_MATCH, 0) >= 0) {
        c[VIA_C_CLIENT] = 'I';
        return;
    }
    cachectl_parse_req(r, &cc);
    c[VIA_C_CLIENT] = cc.no_cache ? 'N' : http_field_find(r, "cookie", 0) >= 0 ? 'C' : 'S';
}

void
via_codes_lookup(char c[VIA_CODES + 1], const char *fwd, int reval)
{
    if (fwd == NULL || strcmp(fwd, "bypass") == 0 || strcmp(fwd, "method") == 0)
        return;         /* the cache was not consulted */
    c[VIA_C_CACHE_TYPE] = 'C';
    if (reval || strcmp(fwd, "stale") == 0 || strcmp(fwd, "request") == 0) {
        c[VIA_C_CACHE] = 'S';
        c[VIA_C_LOOKUP] = 'S';
    } else {
        c[VIA_C_CACHE] = 'M';
        c[VIA_C_LOOKUP] = 'M';
    }
}

/* Copy at most max bytes of s to p. */
static char *
via_cpy(char *p, const char *s, size_t max)
{
    size_t n = strlen(s);

    if (n > max)
        n = max;
    memcpy(p, s, n);
    return p + n;
}

/* "NAME (STRING" of a request's (0) or a response's (1) Via: the same for
 * every request of a configuration, so made once per configuration (a
 * worker keeps its configuration for life). */
static char *
via_mid(char *p, const struct conf_records *rec, int response)
{
    static const struct conf_records *mrec;
    static char   mid[2][2 * VIA_PART_MAX + 2];
    static size_t midlen[2];

    if (mrec != rec) {
        for (int i = 0; i < 2; i++) {
            char *q = via_cpy(mid[i], rec->proxy_name, VIA_PART_MAX);
            q = via_cpy(q, " (", 2);
            q = via_cpy(q, i ? rec->via_resp_str : rec->via_req_str, VIA_PART_MAX);
            midlen[i] = (size_t)(q - mid[i]);
        }
        mrec = rec;
    }
    memcpy(p, mid[response != 0], midlen[response != 0]);
    return p + midlen[response != 0];
}

size_t
via_format(char *out, int response, int tls, int minor, const char *codes)
{
    const struct conf_records *rec = &wk->conf->rec;
    int level = response ? rec->via_resp_level : rec->via_req_level;
    char *p = out;

    if (level <= 0)
        return 0;
    p = via_cpy(p, tls ? "Via: https/1." : "Via: http/1.", 13);
    *p++ = minor == 0 ? '0' : '1';
    *p++ = ' ';
    p = via_mid(p, rec, response);
    if (level >= 2 && codes) {
        p = via_cpy(p, " [", 2);
        if (level >= 3)
            p = via_cpy(p, codes, VIA_CODES);
        else if (response)
            p = via_cpy(p, codes + VIA_C_CACHE - 1, 6);
        else
            p = via_cpy(p, codes, 4);
        *p++ = ']';
    }
    p = via_cpy(p, ")\r\n", 3);
    return (size_t)(p - out);
}

size_t
via_server_tail(const char *blk, size_t len)
{
    size_t end = len;

    /* the run of Server lines at the end (store.c moves them all there) */
    while (end >= 10 && blk[end - 1] == '\n') {
        const char *nl = memrchr(blk, '\n', end - 1);
        size_t ll;
        if (nl == NULL)
            break;
        ll = (size_t)(blk + end - (nl + 1));
        if (ll < 9 || (nl[1] | 0x20) != 's' || strncasecmp(nl + 1, "server:", 7) != 0)
            break;
        end -= ll;
    }
    return len - end;
}

void
via_codes_hit(char c[VIA_CODES + 1], const char *cs, int status)
{
    int asked = strstr(cs, "fwd-status=") != NULL;

    c[VIA_C_CACHE_TYPE] = 'C';
    c[VIA_C_CACHE] = c[VIA_C_LOOKUP] = 'H';
    c[VIA_C_PROXY] = status == 304 ? 'N' : 'S';
    if (strstr(cs, "collapsed"))
        c[VIA_C_CACHE] = 'W';           /* another request's fill */
    else if (strstr(cs, "stale") || strstr(cs, "fwd=request"))
        c[VIA_C_CACHE] = c[VIA_C_LOOKUP] = 'S';
    if (strstr(cs, "stale-if-error")) {
        c[VIA_C_SERVER] = 'E';
        c[VIA_C_CONNECT] = asked ? 'S' : 'F';
    } else if (asked) {
        /* the origin said 304 to our validators */
        c[VIA_C_SERVER] = 'N';
        c[VIA_C_CONNECT] = 'S';
        if (!strstr(cs, "not-refreshed"))
            c[VIA_C_FILL] = 'U';
        if (status != 304)
            c[VIA_C_PROXY] = 'R';
    }
    if (status == 304 && c[VIA_C_LOOKUP] == 'H')
        c[VIA_C_LOOKUP] = 'N';
}

/* One Forwarded parameter's separator. */
static int
via_fwd_sep(struct buf *o, int *n)
{
    return (*n)++ ? buf_lit(o, ";") : 0;
}

/* Is v an RFC 9110 token (a Forwarded value written bare)? */
static int
via_is_token(const char *v, size_t vl)
{
    for (size_t i = 0; i < vl; i++) {
        unsigned char c = (unsigned char)v[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
              || (c && strchr("!#$%&'*+-.^_`|~", c))))
            return 0;
    }
    return vl > 0;
}

int
via_put_forwarded(struct buf *o, const struct http_req *r, const char *host, size_t hostlen,
                  const struct sockaddr *peer, int tls)
{
    const struct conf_records *rec = &wk->conf->rec;
    int f = rec->insert_forwarded, n = 0, err = 0;
    size_t mark = o->end;

    if (f == 0)
        return 0;
    err |= buf_lit(o, "Forwarded: ");
    if (f & CONF_FWD_FOR) {
        size_t l;
        const char *ip = fmt_peer_text(peer, &l);
        int v6 = peer->sa_family == AF_INET6;
        err |= via_fwd_sep(o, &n);
        err |= v6 ? buf_lit(o, "for=\"[") : buf_lit(o, "for=");
        err |= buf_append(o, ip, l);
        if (v6)
            err |= buf_lit(o, "]\"");
    }
    if (f & CONF_FWD_BY_UNKNOWN) {
        err |= via_fwd_sep(o, &n);
        err |= buf_lit(o, "by=unknown");
    }
    if (f & CONF_FWD_BY_NAME) {
        err |= via_fwd_sep(o, &n);
        err |= buf_lit(o, "by=");
        err |= buf_puts(o, rec->proxy_name);
    }
    if (f & CONF_FWD_PROTO) {
        err |= via_fwd_sep(o, &n);
        err |= tls ? buf_lit(o, "proto=https") : buf_lit(o, "proto=http");
    }
    /* host= is the authority the request was routed by (the target's in
     * the absolute form, RFC 9112 3.2.2), quoted unless it is a token:
     * Host may hold ',' ';' '=' (sub-delims), which would otherwise start
     * a parameter or an element of the client's choosing (RFC 7239 4).
     * Host never holds '"' or '\\' (http_host_split), but a value that
     * did could not be quoted safely: left out. */
    if ((f & CONF_FWD_HOST) && hostlen > 0 && !memchr(host, '"', hostlen)
        && !memchr(host, '\\', hostlen)) {
        int q = !via_is_token(host, hostlen);
        err |= via_fwd_sep(o, &n);
        err |= q ? buf_lit(o, "host=\"") : buf_lit(o, "host=");
        err |= buf_append(o, host, hostlen);
        if (q)
            err |= buf_lit(o, "\"");
    }
    if (f & CONF_FWD_CONN_COMPACT) {
        err |= via_fwd_sep(o, &n);
        err |= tls ? buf_lit(o, "connection=https") : buf_lit(o, "connection=http");
    }
    if (f & CONF_FWD_CONN_STD) {
        err |= via_fwd_sep(o, &n);
        err |= tls ? buf_lit(o, "connection=https/1.") : buf_lit(o, "connection=http/1.");
        err |= r->minor == 0 ? buf_lit(o, "0") : buf_lit(o, "1");
    }
    if (n == 0) {
        o->end = mark;      /* nothing to say (host only, and no Host) */
        return 0;
    }
    return err | buf_lit(o, "\r\n");
}
