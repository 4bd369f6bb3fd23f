/*
 * worker/req.c: a request's steps, Varnish-style.
 *
 *   RECV --> ROUTE --> LOOKUP --> HIT ------------------------> DONE
 *     |        |  \       |  \                                  ^
 *     |        |   \      |   WAIT --(the fill ended)--> ROUTE  |
 *     |        |    \     +--> FETCH --(transaction over)-------+
 *     |        |     \             \--(origin failed)--> SYNTH -+
 *     |        |      +--> PUSH --(stored or refused)--> SYNTH -+
 *     |        +---------> PURGE ------------------> SYNTH -----+
 *     +--(admin, ip_allow, redirects, 404s, refusals)--> SYNTH -+
 *
 * Each step is a function that does its work and returns the next step;
 * req_steps() is the one loop that runs them.  A step that must wait
 * (WAIT for another worker's fill, FETCH and PUSH for their transaction,
 * HIT for its lent body to go out) returns REQ_PARK, and the request goes
 * on from where it is when its owner or an event resumes it
 * (req_answer_ours, req_sent_all, req_finish, req_abort, the wait list).
 *
 * Invariants:
 *  - Only req_steps() writes rq_step.  Only the connection code (conn.c)
 *    writes connection state: a request says what it wants (rq_close, the
 *    step it parked in) and its owner acts on it.
 *  - Every answer of our own is made in SYNTH, which also counts its
 *    status (through resp.c).  Steps and transactions describe it in
 *    rq->syn.
 *  - DONE runs exactly once per request, whatever ends it: it writes the
 *    access-log line, releases the held object and the request's own fill
 *    claim (a background revalidation's that never reached the origin;
 *    fill_release wakes the waiters), and frees a PUSH.  Earlier releases
 *    are deliberate: the lookup drops an object it will not use, an origin
 *    answer drops the stale object it replaces, and the transaction's
 *    claim ends with its fill (proxy.c).
 *  - The only calls from here up to the owner are through rq_ops (moved,
 *    revalidate): a request never calls conn.c by name.
 *
 * State that lives only while the steps run (the remap result, the cache
 * key, a redirect's Location) is in struct req_route on req_steps()'s
 * stack, not in the request: a WAIT resumes at ROUTE and computes it anew.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "shm/log.h"
#include "shm/filltab.h"
#include "shm/labeltab.h"
#include "worker/req.h"
#include "worker/tunnel.h"
#include "worker/worker.h"

/* The methods a mapped URL takes (405 and OPTIONS answers); PUSH too when
 * proxy.config.http.push_method_enabled says so, not listed. */
#define REQ_ALLOW "Allow: GET, HEAD, POST, PUT, DELETE, OPTIONS, TRACE, PURGE\r\n"

struct req_route {
    struct conf_remap_result res;
    const struct conf_remap_rule *rule;
    const char      *fwd;             /* Cache-Status fwd= */
    int              verdict;         /* LOOKUP's (enum store_verdict) */
    int              claimed;         /* LOOKUP claimed the fill */
    uint8_t          hash[16];        /* ...of this key */
    size_t           keylen;          /* 0: not cacheable */
    char             key[STORE_KEY_MAX];
    char             cs[112];         /* a hit's Cache-Status */
    char             loc[sizeof(((struct conf_remap_result *)0)->path) + 512];
};

/* ------------------------------------------------------------------ */
/* The pool */

struct req *
req_new(void *owner, const struct req_owner_ops *ops)
{
    struct req *rq;

    if ((rq = pool_get(&wk->req_pool)) == NULL)
        return NULL;
    rq->rq_magic = REQ_MAGIC;
    rq->rq_step = REQ_DONE;     /* nothing running yet */
    rq->rq_owner = owner;
    rq->rq_ops = ops;
    /* (rq_in, rq_out, rq_id, rq_peer, rq_tls: the owner's to set) */
    rq->rq_body = NULL;
    rq->rq_body_len = 0;
    rq->rq_hit_pos = rq->rq_hit_end = 0;
    rq->rq_rww = NULL;
    rq->rq_slice = NULL;
    rq->rq_up = NULL;
    rq->rq_push = NULL;
    rq->rq_tunnel = NULL;
    rq->obj_held = 0;
    rq->rq_claim = 0;
    rq->rq_bg = 0;
    rq->rq_sliced = 0;
    rq->rq_slicer = 0;
    rq->rq_h2 = 0;
    rq->wnext = NULL;
    rq->log.active = 0;
    rq->rq_plugged = 0;
    rq->rq_prule = NULL;
    req_reset(rq);
    return rq;
}

void
req_free(struct req *rq)
{
    if (rq == NULL)
        return;
    magic_check(rq->rq_magic, REQ_MAGIC);
    if (rq->rq_step != REQ_DONE || rq->rq_up || rq->rq_push || rq->obj_held || rq->rq_claim
        || rq->rq_tunnel || rq->rq_rww)
        req_abort(rq);
    rq->rq_magic = 0;
    pool_put(&wk->req_pool, rq);
}

void
req_reset(struct req *rq)
{
    if (rq->rq_step != REQ_DONE)
        req_finish(rq);
    http_req_reset(&rq->r);
    rq->counted = 0;
    rq->rq_close = 0;
    rq->rq_abort = 0;
    rq->rq_body_owned = 0;
    rq->rq_nowait = 0;
    rq->rq_collapsed = 0;
    memset(&rq->syn, 0, sizeof(rq->syn));
    rq->rq_t0 = rq->rq_ttfb = rq->rq_ostart = 0;
    rq->rq_result = NULL;
    rq->rq_sent = 0;
    rq->rq_rule = -1;
    rq->rq_topkey = 0;
}

/* ------------------------------------------------------------------ */
/* Helpers of the steps */

static int
req_keep_alive(const struct req *rq)
{
    return rq->r.keep_alive && !worker_closing();
}

/* A body we answer without: small ones are read and dropped (so the
 * connection survives); with Expect: 100-continue the client may never
 * send it, and a large one is not worth swallowing, so those close. */
int
req_body_discardable(const struct http_req *r)
{
    return !r->has_body || (!r->expect_continue
                            && (r->chunked || r->content_length <= REQ_DISCARD_MAX));
}

/* Describe an answer of ours for SYNTH. */
static enum req_step
req_answer(struct req *rq, int status, const char *extra, const char *body)
{
    rq->syn.status = status;
    rq->syn.extra = extra;
    rq->syn.body = body;
    return REQ_SYNTH;
}

/* "name:port" or "[v6]:port", as opposed to "name" or "[v6]". */
static int
req_host_has_port(const char *v, size_t n)
{
    while (n > 0 && (v[n - 1] >= '0' && v[n - 1] <= '9'))
        n--;
    return n > 0 && v[n - 1] == ':' && (v[0] != '[' || (n >= 2 && v[n - 2] == ']'));
}

/* The answer of the final recipient to TRACE (the request head echoed as
 * message/http, without the credentials it carried: RFC 9110 9.3.8) or
 * OPTIONS (the methods we take). */
static enum req_step
req_answer_final(struct req *rq)
{
    const struct http_req *r = &rq->r;

    if (r->method == HTTP_OPTIONS)
        return req_answer(rq, 200, REQ_ALLOW, NULL);
    /* each line as received plus CRLF (a bare-LF line grows by one) */
    char *echo = malloc(r->head_len + 2 * (size_t)r->nfields + 4);   /* rare: no pool */
    const char *eol = memchr(r->base, '\n', r->head_len);
    size_t n;

    if (echo == NULL || eol == NULL) {
        free(echo);
        rq->syn.refuse = 1;
        rq->syn.close = 1;
        return req_answer(rq, 500, NULL, "out of memory");
    }
    n = (size_t)(eol + 1 - r->base);
    memcpy(echo, r->base, n);
    for (int i = 0; i < r->nfields; i++) {
        const struct http_field *f = &r->fields[i];
        if (f->id == HTTP_F_AUTHORIZATION
            || http_field_is(r, i, "proxy-authorization") || http_field_is(r, i, "cookie"))
            continue;
        size_t l = f->value + f->value_len - f->name;
        memcpy(echo + n, r->base + f->name, l);
        n += l;
        echo[n++] = '\r';
        echo[n++] = '\n';
    }
    echo[n++] = '\r';
    echo[n++] = '\n';
    rq->syn.ctype = "message/http";
    rq->syn.blen = n;
    rq->syn.free_body = 1;
    return req_answer(rq, 200, NULL, echo);
}

/* The cache key of the routed request into rt->key (keylen 0: none). */
static void req_key_forward(struct req_route *rt);

static void
req_key(struct req *rq, struct req_route *rt)
{
    const struct http_req *r = &rq->r;
    struct conf_remap_result *res = &rt->res;

    rt->keylen = store_key(rt->key, sizeof(rt->key), res->scheme, res->host, res->port,
                           res->path);
    if (rt->keylen && rt->rule && wk->conf->rec.pristine_host_hdr) {
        /* The origin is asked with the client's Host (proxy_start), so two
         * vhosts mapped to one origin are two objects: the key names the
         * Host sent too, after a space (never in a URL). */
        char ph[300];
        size_t phl = proxy_pristine_host(r, ph, sizeof(ph));
        if (phl == 0 || rt->keylen + 1 + phl >= sizeof(rt->key)) {
            rt->keylen = 0;     /* not cacheable */
        } else {
            rt->key[rt->keylen++] = ' ';
            for (size_t i = 0; i < phl; i++)
                rt->key[rt->keylen++] = (char)tolower((unsigned char)ph[i]);
            rt->key[rt->keylen] = '\0';
        }
    }
    if (rt->keylen && rt->rule == NULL && r->method != HTTP_M_PUSH)
        req_key_forward(rt);
}

/* A forward-proxied request's objects are its own: its key is the URL
 * followed by " forward" (a space is never in a URL), so a forward client
 * never reads what a remap rule stored from the same origin URL (the
 * rule's ACLs, and the forward-proxy destination default that keeps the
 * machine's own addresses out of reach, would be bypassed by a hit), nor
 * fills it.  PUSH stores under the plain URL (the seed's PUSH of
 * http://fakehost/fake is read through a map rule); PURGE removes both. */
#define FORWARD_SUFFIX " forward"
static void
req_key_forward(struct req_route *rt)
{
    size_t n = sizeof(FORWARD_SUFFIX) - 1;

    if (rt->keylen + n >= sizeof(rt->key)) {
        rt->keylen = 0;     /* not cacheable */
        return;
    }
    memcpy(rt->key + rt->keylen, FORWARD_SUFFIX, n + 1);
    rt->keylen += n;
}

static enum req_step req_purge_admin(struct req *rq);

/* ------------------------------------------------------------------ */
/* The steps */

/* ip_allow.config's word on the client and method.  It depends on the
 * address, the method and the configuration, which a worker keeps for
 * life: the last answer is remembered, so the requests of a keep-alive
 * connection (or of one client) ask ip_allow once. */
static int
req_ip_allowed(const struct sockaddr *sa, int method, const char *m)
{
    static const struct conf *mconf;
    static int mmethod, mok;
    static struct { sa_family_t fam; uint8_t a[16]; } mpeer;
    const void *a = NULL;
    size_t alen = 0;

    if (sa->sa_family == AF_INET) {
        a = &((const struct sockaddr_in *)sa)->sin_addr;
        alen = 4;
    } else if (sa->sa_family == AF_INET6) {
        a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        alen = 16;
    }
    if (a && mconf == wk->conf && mmethod == method && mpeer.fam == sa->sa_family
        && (alen == 4 ? memcmp(mpeer.a, a, 4) : memcmp(mpeer.a, a, 16)) == 0)
        return mok;
    mok = conf_ip_method_allowed(&wk->conf->ip_allow, sa, m, strlen(m));
    mconf = a ? wk->conf : NULL;
    mmethod = method;
    mpeer.fam = sa->sa_family;
    if (a)
        memcpy(mpeer.a, a, alen);
    return mok;
}

static enum req_step
step_recv(struct req *rq, struct req_route *rt)
{
    const struct http_req *r = &rq->r;
    const char *m = http_method_name(r->method);

    (void)rt;
    wk->ctr->requests++;
    alog_begin(rq);
    if (!req_ip_allowed(rq->rq_peer, r->method, m)) {
        char peer[64];
        fmt_peer(rq->rq_peer, peer, sizeof(peer));
        log_notice("conn %llu from %s: %s denied by %s",
                   (unsigned long long)rq->rq_id, peer, m,
                   wk->conf->ip_allow.source);
        rq->syn.close = 1;      /* no body of a refused client is read */
        rq->syn.result = "TCP_DENIED";
        return req_answer(rq, 403, NULL, "access denied by ip_allow");
    }
    if (admin_handle(rq, &rq->syn))
        return REQ_SYNTH;
    if (purge_is_path(r))
        return req_purge_admin(rq);
    if (wk->conf->nglobals && plug_read_request(rq))
        return REQ_SYNTH;       /* a global plugin denied it */
    return REQ_ROUTE;
}

/* A redirect rule matched: 301 or 307 to its target. */
static enum req_step
req_redirect(struct req *rq, struct req_route *rt)
{
    const struct conf_remap_result *res = &rt->res;
    int def = strcmp(res->scheme, "https") == 0 ? 443 : 80;
    int status = rt->rule->type == CONF_REMAP_REDIRECT
                 || rt->rule->type == CONF_REMAP_REGEX_REDIRECT ? 301 : 307;

    if (rq->r.method == HTTP_M_PUSH || rq->r.method == HTTP_PURGE)
        return req_answer(rq, 404, NULL, "a redirect rule holds no cached object");
    if (res->port == def)
        snprintf(rt->loc, sizeof(rt->loc), "Location: %s://%s%s\r\n", res->scheme,
                 res->host, res->path);
    else
        snprintf(rt->loc, sizeof(rt->loc), "Location: %s://%s:%d%s\r\n", res->scheme,
                 res->host, res->port, res->path);
    return req_answer(rq, status, rt->loc, http_status_text(status));
}

/* The local port the request arrived on, or 0 when unknown. */
static int
req_local_port(struct req *rq)
{
    const struct sockaddr *sa = rq->rq_ops->local(rq);

    if (sa == NULL)
        return 0;
    if (sa->sa_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    if (sa->sa_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return 0;
}

/* The matched rule's ACL filters (remap.config @action= and named
 * filters): may this request go on?  A refusal is logged with the rule
 * and the filter that decided. */
static int
req_acl_allows(struct req *rq, const struct conf_remap_rule *rule)
{
    const struct conf *cf = wk->conf;
    const char *m = http_method_name(rq->r.method), *by = NULL;
    const struct sockaddr *local = rule->acl_local ? rq->rq_ops->local(rq) : NULL;

    if (conf_remap_acl_allows(&cf->remap, rule, rq->rq_peer, local, m,
                              strlen(m), &by))
        return 1;
    char peer[64];
    fmt_peer(rq->rq_peer, peer, sizeof(peer));
    log_notice("conn %llu from %s: %s denied by %s:%d (filter %s)",
               (unsigned long long)rq->rq_id, peer, m, rule->file, rule->line,
               by != NULL ? by : "in-line");
    rq->syn.result = "TCP_DENIED";
    return 0;
}

static enum req_step
step_route(struct req *rq, struct req_route *rt)
{
    const struct conf *cf = wk->conf;
    const struct http_req *r = &rq->r;
    const char *base = r->base, *path = base + r->path;
    size_t pathlen = r->path_len;
    char npath[sizeof(rt->res.path) + 1];
    int mfi;

    if (r->method == HTTP_CONNECT)
        return REQ_TUNNEL;
    if (r->method == HTTP_M_PUSH && !cf->rec.push_method_enabled)
        return req_answer(rq, 403, NULL,
                          "PUSH is disabled (proxy.config.http.push_method_enabled)");
    /* OPTIONS * asks about the server as a whole (RFC 9110 9.3.7): us. */
    if (r->method == HTTP_OPTIONS && pathlen == 1 && path[0] == '*')
        return req_answer_final(rq);
    /* Remap, the cache key and the origin all see the normalised path. */
    if ((path = http_req_path(r, npath, sizeof(npath), &pathlen)) == NULL)
        return req_answer(rq, 414, NULL, "request target too long to map");

    /* Over TLS an origin-form request is an https one, and a Host without
     * a port means 443 (the parser, knowing no connection, said 80). */
    int https = r->https, port = r->port;
    if (rq->rq_tls && !r->absolute) {
        https = 1;
        if (r->f_host >= 0 && !req_host_has_port(base + r->fields[r->f_host].value,
                                                 r->fields[r->f_host].value_len))
            port = 443;
    }
    /* map_with_recv_port rules match on the port the connection came in
     * on: only then is it looked up */
    int recv_port = 0;
    if (cf->remap.has_recv_port && r->host_len != 0)
        recv_port = req_local_port(rq);
    rt->rule = r->host_len == 0 ? NULL
             : conf_remap_find_recv(&cf->remap, https ? "https" : "http", base + r->host,
                                    r->host_len, port, recv_port, path, pathlen, &rt->res);
    metrics_route(rq, rt->rule);
    if (rt->rule != NULL && rt->rule->nacl > 0 && !req_acl_allows(rq, rt->rule))
        return req_answer(rq, 403, NULL, "Access Denied");
    if (rt->rule == NULL && r->absolute && !cf->rec.remap_required
        && r->host_len < sizeof(rt->res.host) && pathlen + 1 < sizeof(rt->res.path)) {
        /* Forward proxy: the target's own authority is the origin. */
        struct conf_remap_result *res = &rt->res;
        memset(res, 0, sizeof(*res));
        snprintf(res->scheme, sizeof(res->scheme), "%s", r->https ? "https" : "http");
        memcpy(res->host, base + r->host, r->host_len);
        res->port = r->port;
        if (path[0] != '/')
            res->path[res->pathlen++] = '/';
        memcpy(res->path + res->pathlen, path, pathlen);
        res->pathlen += pathlen;
    } else if (rt->rule == NULL) {
        return req_answer(rq, 404, NULL, "no remap rule matches this request");
    } else if (rt->rule->type == CONF_REMAP_REDIRECT
               || rt->rule->type == CONF_REMAP_REDIRECT_TEMPORARY
               || rt->rule->type == CONF_REMAP_REGEX_REDIRECT
               || rt->rule->type == CONF_REMAP_REGEX_REDIRECT_TEMPORARY) {
        return req_redirect(rq, rt);
    }

    /* RFC 9110 7.6.2: TRACE or OPTIONS with Max-Forwards: 0 is answered
     * here, as its final recipient. */
    if (http_max_forwards(r, &mfi) == 0)
        return req_answer_final(rq);

    /* A mapped request: the cache's business first, then the origin. */
    req_key(rq, rt);
    if ((rt->rule != NULL && rt->rule->nplugins) || cf->nglobals) {
        /* the plugins' remap: another target, another key, or a refusal */
        enum plug_remap_rc prc = plug_remap(rq, rt->rule, &rt->res, rt->key, &rt->keylen,
                                            sizeof(rt->key));
        if (prc == PLUG_DENY)
            return REQ_SYNTH;
        if (prc == PLUG_REKEY)
            req_key(rq, rt);
    }
    alog_mapped(rq, &rt->res);
    rt->fwd = wk->cache ? "method" : "bypass";
    if (r->method == HTTP_PURGE)
        return rt->keylen ? REQ_PURGE : req_answer(rq, 404, NULL, "not cached");
    if (r->method == HTTP_M_PUSH) {
        if (wk->cache == NULL || rt->keylen == 0) {
            rq->syn.close = 1;
            return req_answer(rq, 503, NULL,
                              wk->cache ? "URL too long to cache" : "no cache is configured");
        }
        return REQ_PUSH;
    }
    return REQ_LOOKUP;
}

/* The request's key in the busiest-URL table (shm/urltop.h): from the
 * hash the lookup made when a hit has the key itself (no Vary), else
 * hashed here (a miss, off the hit path). */
static void
req_topkey(struct req *rq, const struct req_route *rt, enum req_step s)
{
    uint8_t h[16];

    if (rq->rq_topkey || rq->rq_bg)
        return;     /* counted before a WAIT; a background revalidation */
    if (s == REQ_HIT && rq->obj_keylen == rt->keylen) {
        metrics_url(rq, rq->obj.key_hash);
        return;
    }
    cache_key_hash(wk->cache, rt->key, rt->keylen, h);
    metrics_url(rq, h);
}

/* ATS slice (proxy.config.cistern.slice.blockbytes): does slicing apply
 * to rq, a cacheable GET with one Range that has a first byte, on an
 * owner that can start slice fetches?  store_range_first's kind (1
 * closed, 2 open) with [*a, *b], or 0. */
static int
req_sliceable(const struct req *rq, size_t keylen, uint64_t *a, uint64_t *b)
{
    int i;

    if (wk->conf->rec.slice_blockbytes == 0 || wk->conf->rec.collapse_timeout <= 0
        || rq->rq_bg || rq->rq_ops->slice == NULL   /* (nothing to wait with) */
        || rq->r.method != HTTP_GET || rq->r.has_body || !rq->rq_pol.cache
        || (i = http_field_find_id(&rq->r, HTTP_F_RANGE, 0)) < 0
        || http_field_find_id(&rq->r, HTTP_F_RANGE, i + 1) >= 0
        /* a condition is the origin's to answer (a 304, a 412): a
         * block fetch replaying it gets that and not its 206 */
        || rq->r.fidx[HTTP_F_IF_RANGE] || rq->r.fidx[HTTP_F_IF_NONE_MATCH]
        || rq->r.fidx[HTTP_F_IF_MODIFIED_SINCE] || http_field_find(&rq->r, "if-match", 0) >= 0
        || http_field_find(&rq->r, "if-unmodified-since", 0) >= 0
        || keylen + STORE_PART_SUFFIX_LEN >= STORE_KEY_MAX || http_req_no_store(&rq->r))
        return 0;
    return store_range_first(rq->r.base + rq->r.fields[i].value, rq->r.fields[i].value_len,
                             a, b);
}

/* A GET the object's key does not answer: a stored part (a 206, RFC
 * 9111 3.3) under the part key may, when it is fresh: a Range request
 * it holds every byte of is a hit; one it holds the head or the tail of
 * (or a request without Range) keeps it held, and the fetch asks only
 * for the rest (store_part_plan, proxy.c).  On a slicing rule, a range
 * the part holds the first byte of is streamed from it, block by block
 * (worker/slice.c).  1: a hit (held, rt->verdict STORE_HIT). */
static int
req_lookup_part(struct req *rq, struct req_route *rt)
{
    char pkey[STORE_KEY_MAX], cs[sizeof(rt->cs)];
    const char *why;
    struct store_cpl cp;
    uint8_t h[16];
    uint64_t a, b;
    int v;

    if (rq->r.method != HTTP_GET || http_field_find_id(&rq->r, HTTP_F_IF_RANGE, 0) >= 0
        || rt->keylen + STORE_PART_SUFFIX_LEN >= sizeof(pkey))
        return 0;
    memcpy(pkey, rt->key, rt->keylen);
    memcpy(pkey + rt->keylen, STORE_PART_SUFFIX, STORE_PART_SUFFIX_LEN);
    cache_key_hash(wk->cache, pkey, rt->keylen + STORE_PART_SUFFIX_LEN, h);
    /* (counted for a Range request, as before; not for the look a
     * request without Range takes after its counted miss) */
    v = store_lookup(rq, pkey, rt->keylen + STORE_PART_SUFFIX_LEN, h,
                     rq->r.fidx[HTTP_F_RANGE] != 0, &why, cs, sizeof(cs));
    if (v == STORE_HIT && (store_part_covers(rq)
                           || (req_sliceable(rq, rt->keylen, &a, &b)
                               && slice_begin(rq, pkey, rt->keylen + STORE_PART_SUFFIX_LEN, h,
                                              a, b)))) {
        rt->verdict = STORE_HIT;
        memcpy(rt->cs, cs, sizeof(cs));
        return 1;
    }
    if (v != STORE_HIT || !store_part_plan(rq, &cp))
        store_release(rq);
    return 0;
}

/* ATS slice: a Range miss fetches the aligned blocks that hold it (a few
 * at once for a short closed range, else the first one, streamed on by
 * worker/slice.c) on an internal request of its own, stored as a part
 * (combined with the part stored before), and waits for it like a
 * collapsed miss: woken, the part lookup answers it.  Once per request
 * (a failed slice fetch leaves it to go to the origin with its own
 * range).  1: wait on rt->hash. */
static int
req_slice(struct req *rq, struct req_route *rt)
{
    char pkey[STORE_KEY_MAX];
    uint8_t h[16];
    uint64_t a, b;

    if (rq->rq_sliced || !req_sliceable(rq, rt->keylen, &a, &b))
        return 0;
    memcpy(pkey, rt->key, rt->keylen);
    memcpy(pkey + rt->keylen, STORE_PART_SUFFIX, STORE_PART_SUFFIX_LEN);
    cache_key_hash(wk->cache, pkey, rt->keylen + STORE_PART_SUFFIX_LEN, h);
    if (!slice_start(rq, h, a, b))
        return 0;
    memcpy(rt->hash, h, 16);    /* what step_wait waits on */
    return 1;
}

/* Read-while-writer: follow a published fill from its bytes (a HIT); a
 * request that cannot (Range, conditions), or that a lookup would not
 * give it stored (cookies, freshness), goes to the origin rather than
 * waiting for a large fill; else it waits (registered by the claim). */
static enum req_step
req_join(struct req *rq, struct req_route *rt)
{
    int j = rww_join(rq, rt->hash);

    if (j == 0 && !store_joinable(rq, &rq->obj)) {
        rww_release(rq);
        j = -2;
    }
    switch (j) {
    case 0:
        return REQ_HIT;
    case -2:
        filltab_unwait(wk->shm->filltab, rt->hash, (int)wk->slotno);
        return REQ_FETCH;
    default:
        return REQ_WAIT;
    }
}

static enum req_step
req_lookup(struct req *rq, struct req_route *rt)
{
    const struct http_req *r = &rq->r;
    int cacheable_method = r->method == HTTP_GET || r->method == HTTP_HEAD;
    int hashed = 0;

    rt->verdict = STORE_MISS;
    rt->claimed = 0;
    /* What may be cached and how (records.config, cache.config) */
    store_policy(rq, &rt->res);
    if (r->fidx[HTTP_F_UPGRADE] && tunnel_upgrade_asked(rq))
        rt->keylen = 0;     /* an Upgrade is forwarded, never cached */
    /* A GET or HEAD with a body (content RFC 9110 9.3.1 gives no meaning,
     * but an origin may answer by it) neither takes an answer from the
     * shared cache nor leaves one there: it is passed through. */
    if (!rq->rq_pol.cache) {
        rt->fwd = "bypass";     /* cache.http 0, or cache.config never-cache */
    } else if (wk->cache && cacheable_method && !r->has_body) {
        if (rt->keylen) {
            /* the key's hash, made once: the lookup's and the fill table's */
            cache_key_hash(wk->cache, rt->key, rt->keylen, rt->hash);
            hashed = 1;
            rt->verdict = store_lookup(rq, rt->key, rt->keylen, rt->hash, 1, &rt->fwd, rt->cs,
                                       sizeof(rt->cs));
            if (rt->verdict == STORE_HIT || rt->verdict == STORE_HIT_STALE)
                return REQ_HIT;
            if (rt->verdict == STORE_MISS && r->fidx[HTTP_F_RANGE] && req_lookup_part(rq, rt))
                return REQ_HIT;
            if (rt->verdict == STORE_MISS && req_slice(rq, rt)) {
                store_release(rq);      /* a part held to complete: the slice's */
                return REQ_WAIT;        /* for the slice fetch (rt->hash) */
            }
            if (rt->verdict == STORE_ONLY_CACHED) {
                rq->syn.extra = "Cache-Status: cistern; fwd=miss; detail=only-if-cached\r\n";
                rq->syn.status = 504;
                rq->syn.body = "not in cache (only-if-cached)";
                return REQ_SYNTH;
            }
        } else {
            rt->fwd = "bypass";
        }
    } else if (r->has_body && cacheable_method) {
        rt->fwd = "bypass";
    }
    /* Collapsed forwarding: one fetch per missing object, all workers; and
     * one revalidation per object stale by itself (expired, or soft
     * purged: a purge storm is no origin stampede).  A revalidation asked
     * for by the request's own directives goes on alone. */
    int stale = rt->verdict == STORE_REVALIDATE && !rq->rq_claim && rt->fwd
                && strcmp(rt->fwd, "stale") == 0;     /* (a background one holds its claim) */
    if (wk->cache && rt->keylen && (rt->verdict == STORE_MISS || stale)
        && rq->rq_pol.cache && r->method == HTTP_GET && !r->has_body && !rq->rq_nowait
        && wk->conf->rec.collapse_timeout > 0 && !http_req_no_store(r)) {
        struct timeval now;
        event_base_gettimeofday_cached(wk->base, &now);
        if (!hashed)
            cache_key_hash(wk->cache, rt->key, rt->keylen, rt->hash);
        switch (filltab_claim(wk->shm->filltab, rt->hash, (int)wk->slotno,
                              (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000,
                              (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000)) {
        case FT_CLAIMED:
            rt->claimed = 1;
            break;
        case FT_WAIT:
            if (stale || rq->obj_held)
                store_release(rq);      /* looked up again once the wait ends
                                           (a stale object, a part to complete) */
            return req_join(rq, rt);
        case FT_PASS:
            rt->fwd = "uri-miss";     /* hit-for-miss: straight to the origin */
            return REQ_FETCH;
        default:
            break;
        }
    }
    /* Without Range, a stored part may be completed: looked up only now,
     * once the fetch is ours (not for a hit-for-miss URL: a proxied
     * request paid 5% for this lookup, scripts/profile.sh proxy). */
    if (rt->verdict == STORE_MISS && !r->fidx[HTTP_F_RANGE] && r->method == HTTP_GET
        && wk->cache && rt->keylen && rq->rq_pol.cache && !r->has_body)
        req_lookup_part(rq, rt);
    return REQ_FETCH;
}

static enum req_step
step_lookup(struct req *rq, struct req_route *rt)
{
    enum req_step s = req_lookup(rq, rt);

    if (rt->keylen && wk->cache)
        req_topkey(rq, rt, s);
    return s;
}

/* Collapsed forwarding: wait for another worker's fill.  The request sits
 * on the worker's wait list (its owner reads nothing meanwhile) until the
 * fill table no longer shows the fill in progress or shows it published
 * for read-while-writer (the filler's wake-up on our eventfd, or the
 * master's after the filler died), or until its deadline, after which it
 * goes to the origin itself, uncollapsed.  Woken, it routes again: a
 * published fill it joins (or, a Range or a condition, fetches alone). */
static enum req_step
step_wait(struct req *rq, struct req_route *rt)
{
    struct timeval now;

    memcpy(rq->whash, rt->hash, 16);
    event_base_gettimeofday_cached(wk->base, &now);
    rq->wdeadline = now;
    rq->wdeadline.tv_sec += wk->conf->rec.collapse_timeout;
    rq->wnext = wk->waitq;
    wk->waitq = rq;
    return REQ_PARK;
}

static void
req_wait_unlink(struct req *rq)
{
    for (struct req **pp = &wk->waitq; *pp; pp = &(*pp)->wnext)
        if (*pp == rq) {
            *pp = rq->wnext;
            break;
        }
    rq->wnext = NULL;
}

static enum req_step
step_hit(struct req *rq, struct req_route *rt)
{
    struct store_cond sc;

    alog_result(rq, "TCP_HIT", 0);
    /* stale-while-revalidate (RFC 5861): serve it now, refresh it behind */
    if (rt->verdict == STORE_HIT_STALE && rq->rq_ops->revalidate)
        rq->rq_ops->revalidate(rq, rt->key, rt->keylen);
    store_cond_from(&sc, &rq->r);
    int ka = req_keep_alive(rq) && req_body_discardable(&rq->r);
    if ((rq->rq_slice ? slice_send(rq, &sc, ka, rt->cs)
                      : store_send(rq, &sc, ka,
                                   rq->rq_rww ? "cistern; hit; detail=read-while-writer" : rt->cs,
                                   NULL, 0)) < 0) {
        store_release(rq);
        rt->verdict = STORE_MISS;
        return REQ_FETCH;
    }
    /* the lent body goes out first; then req_sent_all().  A joiner with
     * nothing to send yet (it joined at the head: no body byte written)
     * parks too, until the filler wakes it. */
    return rq->rq_body_len || rww_waiting(rq) ? REQ_PARK : REQ_DONE;
}

static enum req_step
step_fetch(struct req *rq, struct req_route *rt)
{
    const char *why = NULL;
    int rc = proxy_start(rq, &rt->res, rt->rule, req_keep_alive(rq),
                         rt->keylen ? rt->key : NULL, rt->keylen, rt->fwd,
                         req_answer_ours, &why);

    if (rq->rq_claim && rc == 0 && rq->rq_up) {
        /* the background revalidation's fetch carries its claim */
        rq->rq_up->up_claim = 1;
        memcpy(rq->rq_up->up_hash, rq->whash, 16);
        rq->rq_claim = 0;
    }
    if (rt->claimed) {
        if (rc == 0 && rq->rq_up) {
            rq->rq_up->up_claim = 1;
            memcpy(rq->rq_up->up_hash, rt->hash, 16);
        } else {
            /* failed at once: let the waiters try for themselves */
            fill_release(rt->hash, 0);
        }
    }
    if (rc == 0)
        return REQ_PARK;    /* running (or failed at once: its owner sees) */
    rq->syn.close = 1;      /* refused before it started */
    return req_answer(rq, rc, NULL, why);
}

static enum req_step
step_push(struct req *rq, struct req_route *rt)
{

    if (push_start(rq, rt->key, rt->keylen, req_keep_alive(rq)) == 0)
        return REQ_PARK;        /* receiving the body; then req_answer_ours() */
    return REQ_SYNTH;           /* refused */
}

/* CONNECT: checked and connected by tunnel.c, which tells the owner to
 * hand over once the 200 is queued (or answers 502 / 504 itself). */
static enum req_step
step_tunnel(struct req *rq, struct req_route *rt)
{
    const char *why = NULL;
    int rc = tunnel_connect(rq, req_answer_ours, &why);

    (void)rt;
    if (rc == 0)
        return REQ_PARK;
    rq->syn.close = 1;
    if (rc == 403)
        rq->syn.result = "TCP_DENIED";
    else if (rc < 500)
        rq->syn.refuse = 1;
    return req_answer(rq, rc, NULL, why);
}

/* PURGE with `Fastly-Soft-Purge: 1` (Fastly's field): mark the object
 * stale instead of removing it.  CACHE_OK (one marked), CACHE_MISS or an
 * error. */
static int
req_purge_soft(struct req_route *rt)
{
    char pkey[STORE_KEY_MAX];
    const char *keys[3] = { rt->key, rt->key, pkey };
    size_t lens[3] = { rt->keylen, 0, 0 };
    int n = 1;

    if (rt->rule == NULL && rt->keylen > sizeof(FORWARD_SUFFIX) - 1)
        lens[n++] = rt->keylen - (sizeof(FORWARD_SUFFIX) - 1);   /* and the plain copy */
    if ((lens[n] = store_part_key(rt->key, rt->keylen, pkey)) != 0)
        keys[n++] = pkey;       /* and its stored part */
    int64_t got = purge_run(SHM_PURGE_URL, keys, lens, n, 1);
    return got > 0 ? CACHE_OK : got == 0 ? CACHE_MISS : (int)got;
}

static int
req_soft_asked(const struct http_req *r)
{
    int i = http_field_find(r, "fastly-soft-purge", 0);

    return i >= 0 && r->fields[i].value_len == 1 && r->base[r->fields[i].value] == '1';
}

static enum req_step
step_purge(struct req *rq, struct req_route *rt)
{
    int soft = wk->cache && req_soft_asked(&rq->r);
    int rc = soft ? req_purge_soft(rt)
           : wk->cache ? store_remove(rt->key, rt->keylen) : CACHE_MISS;

    if (!soft && wk->cache && rt->rule == NULL && rt->keylen > sizeof(FORWARD_SUFFIX) - 1) {
        /* a PURGE of an absolute URL no rule maps: the forward-proxied
         * copy too (req_key_forward), then the plain one (a PUSH's) */
        size_t plain = rt->keylen - (sizeof(FORWARD_SUFFIX) - 1);
        int rc2 = store_remove(rt->key, plain);
        if (rc != CACHE_OK && rc2 != CACHE_MISS)
            rc = rc2;       /* removed (OK) or failed: that is the answer */
    }

    rq->syn.result = "TCP_MISS";        /* Squid's code for PURGE and PUSH */
    if (!soft && rc >= CACHE_MISS)
        purge_count(SHM_PURGE_URL, 0, rc == CACHE_OK);
    if (rc == CACHE_OK) {
        log_info("conn %llu: PURGE %s %.*s", (unsigned long long)rq->rq_id,
                 soft ? "marked stale" : "removed", (int)rt->keylen, rt->key);
        return req_answer(rq, 200, NULL, soft ? "marked stale" : "purged");
    }
    if (rc == CACHE_MISS)
        return req_answer(rq, 404, NULL, "not cached");
    return req_answer(rq, 500, NULL, "the cache could not remove the object");
}

/* Every answer of our own: written to the owner's output and counted. */
static enum req_step
step_synth(struct req *rq, struct req_route *rt)
{
    struct req_synth *s = &rq->syn;
    const struct http_req *r = &rq->r;
    int head = r->method == HTTP_HEAD && !(s->refuse && s->status == 400);
    /* a body still to come must be one we can read and drop (a PUSH's or
     * a transaction's was read already: body_done) */
    int ka = !s->close && req_keep_alive(rq) && (r->body_done || req_body_discardable(r));
    const char *ch = s->close ? "Connection: close\r\n" : resp_connection_hdr(r->minor, ka);
    const char *extra = s->extra;
    size_t before = rq->rq_out->end;

    (void)rt;
    if (s->refuse) {
        char peer[64];
        fmt_peer(rq->rq_peer, peer, sizeof(peer));
        log_info("conn %llu from %s: %d %s: %s", (unsigned long long)rq->rq_id, peer,
                 s->status, http_status_text(s->status), s->body ? s->body : "");
        if (s->status < 500 && s->status != 405)
            wk->ctr->bad_requests++;
        if (s->status == 405 && extra == NULL)
            extra = REQ_ALLOW;
    }
    if (s->body == NULL && s->refuse)
        s->body = http_status_text(s->status);
    if (s->ctype)
        resp_body(rq, s->status, ch, s->ctype, s->body, s->blen, head);
    else
        resp_simple(rq, s->status, ch, extra, s->body, head);
    if (s->result)
        alog_result(rq, s->result, 0);
    if (s->free_body)
        free((void *)s->body);
    s->body = NULL;
    s->free_body = 0;
    s->blen = rq->rq_out->end - before;   /* the bytes, for a refusal's log */
    if (s->close)
        rq->rq_close = 1;
    return REQ_DONE;
}

static enum req_step
step_done(struct req *rq, struct req_route *rt)
{

    (void)rt;
    metrics_done(rq);
    if (rq->syn.refuse)
        alog_refused(rq, rq->syn.status, rq->syn.blen);
    else
        alog_end(rq);
    rq->syn.refuse = 0;
    if (rq->rq_claim) {
        /* a background revalidation that never reached the origin: its
         * waiters fetch for themselves */
        rq->rq_claim = 0;
        fill_release(rq->whash, 0);
    }
    if (rq->rq_push)
        push_free(rq);      /* its answer (SYNTH) may have quoted it */
    store_release(rq);
    if (rq->rq_slice)
        slice_end(rq);
    if (rq->rq_plugged)
        plug_txn_end(rq);
    return REQ_PARK;
}

/* The one loop: run from step s until a step parks. */
static void
req_steps(struct req *rq, enum req_step s)
{
    struct req_route rt;

    magic_check(rq->rq_magic, REQ_MAGIC);
    rt.keylen = 0;
    rt.rule = NULL;
    rt.fwd = "bypass";
    rt.verdict = STORE_MISS;
    rt.claimed = 0;
    /* a switch, not a table of pointers: each step is inlined here */
    while (s != REQ_PARK) {
        rq->rq_step = s;
        switch (s) {
        case REQ_RECV:   s = step_recv(rq, &rt); break;
        case REQ_ROUTE:  s = step_route(rq, &rt); break;
        case REQ_LOOKUP: s = step_lookup(rq, &rt); break;
        case REQ_WAIT:   s = step_wait(rq, &rt); break;
        case REQ_HIT:    s = step_hit(rq, &rt); break;
        case REQ_FETCH:  s = step_fetch(rq, &rt); break;
        case REQ_PUSH:   s = step_push(rq, &rt); break;
        case REQ_PURGE:  s = step_purge(rq, &rt); break;
        case REQ_TUNNEL: s = step_tunnel(rq, &rt); break;
        case REQ_SYNTH:  s = step_synth(rq, &rt); break;
        case REQ_DONE:   s = step_done(rq, &rt); break;
        case REQ_PARK:   break;
        }
    }
}

/* ------------------------------------------------------------------ */
/* `cistern ctl cache lookup|purge URL` (worker/ctl.c) */

static const struct sockaddr *
req_ctl_local(struct req *rq)
{
    (void)rq;
    return NULL;
}

static const struct req_owner_ops req_ctl_ops = { .local = req_ctl_local };

/* The key's figures in the busiest-URL tables (shm/urltop.h), and what
 * they mean. */
static void
req_ctl_hits(const struct req_route *rt, struct buf *out)
{
    struct urltop_ent e;
    uint8_t h[16];
    int n;

    if (wk->cache == NULL)
        return;
    cache_key_hash(wk->cache, rt->key, rt->keylen, h);
    n = urltop_lookup(wk->shm, urltop_key(h), &e);
    buf_printf(out, "hits\t%llu\nmisses\t%llu\nrequests\t%llu\nrequests_error\t%llu\n"
               "hits_tracked\t%s\nhits_note\t%s\n",
               (unsigned long long)e.hits, (unsigned long long)e.misses,
               (unsigned long long)e.requests, (unsigned long long)e.err, n ? "true" : "false",
               n ? "requests for this key since the master started, all workers (approximate: "
                   "a busiest-URL table of 256 entries per worker; hits and misses count from "
                   "when the key took its entry; requests may overcount by requests_error)"
                 : "not among the busiest URLs of any worker (0 or few requests)");
}

/* A GET of url from 127.0.0.1 without other fields, parsed (not routed
 * yet): the request (req_ctl_free it), or NULL with *why and *rc (1 bad
 * URL, 4 out of memory). */
static struct req *
req_ctl_new(const char *url, const char **why, int *rc)
{
    static char head[8192 + 600];
    static struct sockaddr_in lo;
    const char *a = strstr(url, "://");
    size_t hl;
    struct req *rq;

    *rc = 1;
    if (a == NULL || strpbrk(url, " \t\r\n") != NULL) {
        *why = "not an absolute http(s) URL";
        return NULL;
    }
    a += 3;
    hl = strcspn(a, "/?#");
    if (hl == 0 || hl > 255 || strlen(url) > 8192) {
        *why = "bad URL";
        return NULL;
    }
    snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: %.*s\r\n\r\n", url, (int)hl, a);
    if ((rq = req_new(NULL, &req_ctl_ops)) == NULL) {
        *why = "out of memory";
        *rc = 4;
        return NULL;
    }
    lo.sin_family = AF_INET;
    lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rq->rq_peer = (const struct sockaddr *)&lo;
    rq->rq_tls = strncmp(url, "https:", 6) == 0;
    if (http_head_scan(&rq->r, head, strlen(head), &wk->limits) != HTTP_OK
        || http_req_parse(&rq->r, head + rq->r.start) != HTTP_OK) {
        *why = "the URL does not make a valid request";
        rq->rq_step = REQ_DONE;
        req_free(rq);
        return NULL;
    }
    return rq;
}

static void
req_ctl_free(struct req *rq)
{
    rq->rq_step = REQ_DONE;
    req_free(rq);
}

/* The cache key a GET of url maps to (remap, key rules; without the
 * forward-proxy suffix), NUL ended in out (STORE_KEY_MAX bytes).  Returns
 * its length, or 0 (no rule maps it, not cacheable, bad URL). */
static size_t
req_map_key(const char *url, char *out)
{
    static struct req_route rt;
    const char *why;
    int rc;
    size_t n = 0;
    struct req *rq = req_ctl_new(url, &why, &rc);

    if (rq == NULL)
        return 0;
    rt.keylen = 0;
    rt.rule = NULL;
    if (step_route(rq, &rt) == REQ_LOOKUP && rt.keylen) {
        n = rt.keylen;
        if (rt.rule == NULL && n > sizeof(FORWARD_SUFFIX) - 1
            && memcmp(rt.key + n - (sizeof(FORWARD_SUFFIX) - 1), FORWARD_SUFFIX,
                      sizeof(FORWARD_SUFFIX) - 1) == 0)
            n -= sizeof(FORWARD_SUFFIX) - 1;
        memcpy(out, rt.key, n);
        out[n] = '\0';
    }
    req_ctl_free(rq);
    return n;
}

/*
 * The arguments of a purge mapped to what the store purges by: tags and
 * all as given; each prefix URL to the key its GET would have; each host
 * to the "scheme://authority/" of the keys of http://HOST/ and
 * https://HOST/ (both schemes; the same one once).  Into *pa's
 * arg/len (pointing into a static area).  NULL, or why not.
 */
static const char *
req_purge_map(struct purge_ask *pa)
{
    static char keys[PURGE_ARGS_MAX * 2][STORE_KEY_MAX];
    static char url[512];
    const char *in[PURGE_ARGS_MAX];
    int nin = pa->nargs, nk = 0;

    if (pa->kind != SHM_PURGE_PREFIX && pa->kind != SHM_PURGE_HOST)
        return NULL;
    memcpy(in, pa->arg, sizeof(in));
    pa->nargs = 0;
    for (int i = 0; i < nin; i++) {
        size_t n, before = (size_t)nk;
        if (pa->kind == SHM_PURGE_PREFIX) {
            if ((n = req_map_key(in[i], keys[nk])) == 0)
                return "a prefix that no rule maps (give an absolute URL as clients send it)";
            pa->arg[pa->nargs] = keys[nk++];
            pa->len[pa->nargs++] = n;
            continue;
        }
        for (int s = 0; s < 2; s++) {
            snprintf(url, sizeof(url), "%s://%s/", s ? "https" : "http", in[i]);
            if (strlen(in[i]) > 255 || strpbrk(in[i], "/?# ") != NULL)
                return "a bad host";
            if ((n = req_map_key(url, keys[nk])) == 0 || (n = purge_key_origin(keys[nk], n)) == 0)
                continue;
            int dup = 0;
            for (int j = 0; j < pa->nargs; j++)
                dup |= pa->len[j] == n && memcmp(pa->arg[j], keys[nk], n) == 0;
            if (!dup) {
                pa->arg[pa->nargs] = keys[nk++];
                pa->len[pa->nargs++] = n;
            }
        }
        if ((size_t)nk == before && pa->nargs == 0 && i == nin - 1)
            return "a host that no rule maps";
    }
    return NULL;
}

/* POST /_purge (purge.c has the interface): ip_allow's PURGE method
 * decides who may, like PURGE. */
static enum req_step
req_purge_admin(struct req *rq)
{
    static struct purge_ask pa;
    static char json[96];
    const struct http_req *r = &rq->r;
    const char *path = r->base + r->path, *q = memchr(path, '?', r->path_len), *why;
    int64_t n;

    rq->syn.result = "TCP_MISS";
    if (!conf_ip_method_allowed(&wk->conf->ip_allow, rq->rq_peer, "PURGE", 5)) {
        rq->syn.close = 1;
        rq->syn.refuse = 1;
        rq->syn.result = "TCP_DENIED";
        return req_answer(rq, 403, NULL, "purging is not allowed from this address (ip_allow PURGE)");
    }
    if (r->method != HTTP_POST)
        return req_answer(rq, 405, "Allow: POST\r\n", "use POST");
    if (wk->cache == NULL)
        return req_answer(rq, 503, NULL, "no cache is configured");
    why = purge_parse_query(q ? q + 1 : "", q ? r->path_len - (size_t)(q + 1 - path) : 0, &pa);
    if (why == NULL)
        why = req_purge_map(&pa);
    if (why) {
        rq->syn.refuse = 1;
        return req_answer(rq, 400, NULL, why);
    }
    n = purge_run(pa.kind, pa.arg, pa.len, pa.nargs, pa.soft);
    if (n < 0)
        return req_answer(rq, 503, NULL, "the cache could not purge (see the error log)");
    log_info("conn %llu: purge %s%s%s%s: %lld objects", (unsigned long long)rq->rq_id,
             purge_kind_name(pa.kind), pa.nargs ? " " : "", pa.nargs ? pa.arg[0] : "",
             pa.soft ? " (soft)" : "", (long long)n);
    snprintf(json, sizeof(json), "{\"purged\": %lld, \"soft\": %s}\n", (long long)n,
             pa.soft ? "true" : "false");
    rq->syn.ctype = "application/json";
    rq->syn.blen = strlen(json);
    return req_answer(rq, 200, NULL, json);
}

/* `cistern ctl cache purge --tag T | --prefix URL | --host H | --all
 * [--soft]`, and `URL --soft`: "name\tvalue" lines into out.  0 (something
 * purged), 1 (nothing, or usage), 4 (error). */
static int
req_ctl_purge(char *args, struct buf *out)
{
    static struct purge_ask pa;
    static char keybuf[STORE_KEY_MAX];
    char *w, *save = NULL;
    const char *why = NULL, *url = NULL;
    int64_t n;

    memset(&pa, 0, sizeof(pa));
    pa.kind = -1;
    for (w = strtok_r(args, " ", &save); w && why == NULL; w = strtok_r(NULL, " ", &save)) {
        int kind = strcmp(w, "--tag") == 0 ? SHM_PURGE_TAG
                 : strcmp(w, "--prefix") == 0 ? SHM_PURGE_PREFIX
                 : strcmp(w, "--host") == 0 ? SHM_PURGE_HOST
                 : strcmp(w, "--all") == 0 ? SHM_PURGE_ALL : -1;
        if (strcmp(w, "--soft") == 0) {
            pa.soft = 1;
        } else if (kind < 0 && w[0] != '-' && url == NULL && pa.kind < 0) {
            url = w;
            pa.kind = SHM_PURGE_URL;
        } else if (kind < 0 || (pa.kind >= 0 && pa.kind != kind)) {
            why = "usage: cache purge URL [--soft] | --tag T... | --prefix URL... | --host H... | --all [--soft]";
        } else if (kind == SHM_PURGE_ALL) {
            pa.kind = kind;
        } else if ((w = strtok_r(NULL, " ", &save)) == NULL || pa.nargs == PURGE_ARGS_MAX) {
            why = "a value is missing";
        } else {
            pa.kind = kind;
            pa.arg[pa.nargs] = w;
            pa.len[pa.nargs++] = strlen(w);
        }
    }
    if (why == NULL && pa.kind < 0)
        why = "what to purge?";
    if (why == NULL && pa.kind == SHM_PURGE_URL) {
        size_t kl = req_map_key(url, keybuf);
        why = kl ? NULL : "no rule maps this URL";
        pa.arg[0] = keybuf;
        pa.len[0] = kl;
        pa.nargs = 1;
    } else if (why == NULL) {
        why = req_purge_map(&pa);
    }
    if (why) {
        buf_printf(out, "error\t%s\n", why);
        return 1;
    }
    n = purge_run(pa.kind, pa.arg, pa.len, pa.nargs, pa.soft);
    if (n < 0) {
        buf_printf(out, "error\tthe cache could not purge\n");
        return 4;
    }
    log_info("ctl: purge %s%s%s%s: %lld objects", purge_kind_name(pa.kind), pa.nargs ? " " : "",
             pa.nargs ? pa.arg[0] : "", pa.soft ? " (soft)" : "", (long long)n);
    buf_printf(out, "kind\t%s\npurged\t%lld\nsoft\t%s\n", purge_kind_name(pa.kind),
               (long long)n, pa.soft ? "true" : "false");
    return n > 0 ? 0 : 1;
}

/* Route URL as a GET from 127.0.0.1 without other fields would be, and
 * look up or purge its key.  Writes "name\tvalue" lines into out; returns
 * 0 (stored / purged), 1 (not stored, no rule maps it), or 4 (error). */
int
req_ctl_cache(int purge, const char *url, struct buf *out)
{
    static struct req_route rt;
    static char args[4096];
    const char *why;
    struct req *rq;
    int rc;

    if (purge && (url[0] == '-' || strstr(url, " --") != NULL)) {
        snprintf(args, sizeof(args), "%s", url);
        return req_ctl_purge(args, out);
    }
    if ((rq = req_ctl_new(url, &why, &rc)) == NULL) {
        buf_printf(out, "error\t%s\n", why);
        return rc;
    }
    rt.keylen = 0;
    rt.rule = NULL;
    if (step_route(rq, &rt) != REQ_LOOKUP || rt.keylen == 0) {
        buf_printf(out, "stored\tfalse\nerror\t%s\n",
                   rq->syn.body && rq->syn.status ? rq->syn.body : "not cacheable");
        rc = 1;
    } else if (!purge) {
        if (rq->rq_rule >= 0)
            buf_printf(out, "rule\t%s\n", labeltab_name(wk->shm->labeltab, LT_RULE, rq->rq_rule));
        rc = store_ctl_lookup(rt.key, rt.keylen, &rq->r, out) ? 0 : 1;
        req_ctl_hits(&rt, out);
    } else {
        int r1 = wk->cache ? store_remove(rt.key, rt.keylen) : CACHE_MISS;
        if (wk->cache && rt.rule == NULL && rt.keylen > sizeof(FORWARD_SUFFIX) - 1) {
            int r2 = store_remove(rt.key, rt.keylen - (sizeof(FORWARD_SUFFIX) - 1));
            if (r1 != CACHE_OK && r2 != CACHE_MISS)
                r1 = r2;
        }
        buf_printf(out, "key\t%.*s\npurged\t%s\n", (int)rt.keylen, rt.key,
                   r1 == CACHE_OK ? "true" : "false");
        if (r1 == CACHE_OK)
            log_info("ctl: purged %.*s", (int)rt.keylen, rt.key);
        rc = r1 == CACHE_OK ? 0 : r1 == CACHE_MISS ? 1 : 4;
        if (r1 >= CACHE_MISS)
            purge_count(SHM_PURGE_URL, 0, r1 == CACHE_OK);
    }
    req_ctl_free(rq);
    return rc;
}

/* ------------------------------------------------------------------ */
/* What owners and events call */

void
req_run(struct req *rq)
{
    rq->rq_t0 = metrics_now();
    req_steps(rq, REQ_RECV);    /* (req_reset made it new) */
}

/* Stop what the step the request parked in runs (no DONE yet). */
static void
req_stop(struct req *rq)
{
    if (rq->rq_step == REQ_WAIT) {
        req_wait_unlink(rq);
        filltab_unwait(wk->shm->filltab, rq->whash, (int)wk->slotno);
    }
    if (rq->rq_up)
        proxy_abort(rq);
    if (rq->rq_push)
        push_free(rq);
    if (rq->rq_tunnel)
        tunnel_abort(rq);
}

void
req_refuse(struct req *rq, int status, const char *why)
{
    req_stop(rq);
    if (rq->rq_t0 == 0)
        rq->rq_t0 = metrics_now();
    memset(&rq->syn, 0, sizeof(rq->syn));
    rq->syn.refuse = 1;
    rq->syn.close = 1;
    rq->syn.status = status;
    rq->syn.body = why;
    req_steps(rq, REQ_SYNTH);
}

void
req_answer_ours(struct req *rq)
{
    req_steps(rq, REQ_SYNTH);
}

void
req_sent_all(struct req *rq)
{
    if (rq->rq_step == REQ_HIT && (rww_waiting(rq) || (rq->rq_slice && slice_sent(rq))))
        return;     /* a joiner that sent what the fill has, a stream that
                       sent what its part holds: woken for more */
    if (rq->rq_step == REQ_HIT
        || (rq->rq_step == REQ_FETCH && rq->rq_up == NULL))
        req_steps(rq, REQ_DONE);
}

void
req_finish(struct req *rq)
{
    if (rq->rq_step != REQ_DONE)
        req_steps(rq, REQ_DONE);
}

void
req_abort(struct req *rq)
{
    alog_intr(rq);
    req_stop(rq);
    req_finish(rq);
}

static void
req_wake(struct req *rq, int timed_out)
{
    req_wait_unlink(rq);
    if (timed_out)
        filltab_unwait(wk->shm->filltab, rq->whash, (int)wk->slotno);
    rq->rq_nowait = timed_out;
    rq->rq_collapsed = !timed_out;
    req_steps(rq, REQ_ROUTE);
    rq->rq_ops->moved(rq);
}

void
req_wait_check(struct worker *w, int deadlines_only)
{
    struct timeval now;
    struct req *rq, *next;

    event_base_gettimeofday_cached(w->base, &now);
    int64_t now_ms = (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
    for (rq = w->waitq; rq; rq = next) {
        next = rq->wnext;
        if (evutil_timercmp(&now, &rq->wdeadline, >=))
            req_wake(rq, 1);
        else if (!deadlines_only
                 && (!filltab_busy(w->shm->filltab, rq->whash, (int)w->slotno, now_ms)
                     || filltab_rww_published(w->shm->filltab, rq->whash)))
            req_wake(rq, 0);    /* the fill ended, or it can be joined now */
        /* next was read before resuming: a resumed request may have
         * ended, never one further down the list */
    }
    if (!deadlines_only && w->joinq)
        rww_wake_all(w);
    if (!deadlines_only && w->sliceq)
        slice_wake_all(w);
}
