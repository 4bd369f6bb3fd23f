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
    rq->rq_up = NULL;
    rq->rq_push = NULL;
    rq->rq_tunnel = NULL;
    rq->obj_held = 0;
    rq->rq_claim = 0;
    rq->rq_bg = 0;
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

/* ------------------------------------------------------------------ */
/* The steps */

static enum req_step
step_recv(struct req *rq, struct req_route *rt)
{
    const struct http_req *r = &rq->r;
    const char *m = http_method_name(r->method);

    (void)rt;
    wk->ctr->requests++;
    alog_begin(rq);
    if (!conf_ip_method_allowed(&wk->conf->ip_allow, rq->rq_peer, m,
                                strlen(m))) {
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

static enum req_step
req_lookup(struct req *rq, struct req_route *rt)
{
    const struct http_req *r = &rq->r;
    int cacheable_method = r->method == HTTP_GET || r->method == HTTP_HEAD;

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
            rt->verdict = store_lookup(rq, rt->key, rt->keylen, &rt->fwd, rt->cs,
                                       sizeof(rt->cs));
            if (rt->verdict == STORE_HIT || rt->verdict == STORE_HIT_STALE)
                return REQ_HIT;
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
    /* Collapsed forwarding: one fetch per missing object, all workers. */
    if (wk->cache && rt->keylen && rt->verdict == STORE_MISS
        && rq->rq_pol.cache && r->method == HTTP_GET && !r->has_body && !rq->rq_nowait
        && wk->conf->rec.collapse_timeout > 0 && !http_req_no_store(r)) {
        struct timeval now;
        event_base_gettimeofday_cached(wk->base, &now);
        cache_key_hash(wk->cache, rt->key, rt->keylen, rt->hash);
        switch (filltab_claim(wk->shm->filltab, rt->hash, (int)wk->slotno,
                              (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000,
                              (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000)) {
        case FT_CLAIMED:
            rt->claimed = 1;
            break;
        case FT_WAIT:
            /* read-while-writer: follow a published fill from its bytes;
             * a request that cannot (Range, conditions) goes to the origin
             * rather than waiting for a large fill */
            switch (rww_join(rq, rt->hash)) {
            case 0:
                return REQ_HIT;
            case -2:
                filltab_unwait(wk->shm->filltab, rt->hash, (int)wk->slotno);
                return REQ_FETCH;
            default:
                return REQ_WAIT;
            }
        case FT_PASS:
            rt->fwd = "uri-miss";     /* hit-for-miss: straight to the origin */
            break;
        default:
            break;
        }
    }
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
 * fill table no longer shows the fill in progress (the filler's wake-up
 * on our eventfd, or the master's after the filler died), or until its
 * deadline, after which it goes to the origin itself, uncollapsed. */
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
    if (store_send(rq, &sc, req_keep_alive(rq) && req_body_discardable(&rq->r),
                   rq->rq_rww ? "cistern; hit; detail=read-while-writer" : rt->cs,
                   NULL, 0) < 0) {
        store_release(rq);
        rt->verdict = STORE_MISS;
        return REQ_FETCH;
    }
    /* the lent body goes out first; then req_sent_all() */
    return rq->rq_body_len ? REQ_PARK : REQ_DONE;
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

static enum req_step
step_purge(struct req *rq, struct req_route *rt)
{
    int rc = wk->cache ? cache_remove(wk->cache, rt->key, rt->keylen) : CACHE_MISS;

    if (wk->cache && rt->rule == NULL && rt->keylen > sizeof(FORWARD_SUFFIX) - 1) {
        /* a PURGE of an absolute URL no rule maps: the forward-proxied
         * copy too (req_key_forward), then the plain one (a PUSH's) */
        size_t plain = rt->keylen - (sizeof(FORWARD_SUFFIX) - 1);
        int rc2 = cache_remove(wk->cache, rt->key, plain);
        if (rc != CACHE_OK && rc2 != CACHE_MISS)
            rc = rc2;       /* removed (OK) or failed: that is the answer */
    }

    rq->syn.result = "TCP_MISS";        /* Squid's code for PURGE and PUSH */
    if (rc == CACHE_OK) {
        log_info("conn %llu: PURGE removed %.*s", (unsigned long long)rq->rq_id,
                 (int)rt->keylen, rt->key);
        return req_answer(rq, 200, NULL, "purged");
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

/* Route URL as a GET from 127.0.0.1 without other fields would be, and
 * look up or purge its key.  Writes "name\tvalue" lines into out; returns
 * 0 (stored / purged), 1 (not stored, no rule maps it), or 4 (error). */
int
req_ctl_cache(int purge, const char *url, struct buf *out)
{
    static struct req_route rt;
    static char head[8192 + 600];
    static struct sockaddr_in lo;
    const char *a = strstr(url, "://");
    size_t hl;
    struct req *rq;
    int rc;

    if (a == NULL || strpbrk(url, " \t\r\n") != NULL) {
        buf_printf(out, "error\tnot an absolute http(s) URL\n");
        return 1;
    }
    a += 3;
    hl = strcspn(a, "/?#");
    if (hl == 0 || hl > 255 || strlen(url) > 8192) {
        buf_printf(out, "error\tbad URL\n");
        return 1;
    }
    snprintf(head, sizeof(head), "GET %s HTTP/1.1\r\nHost: %.*s\r\n\r\n", url, (int)hl, a);
    if ((rq = req_new(NULL, &req_ctl_ops)) == NULL) {
        buf_printf(out, "error\tout of memory\n");
        return 4;
    }
    lo.sin_family = AF_INET;
    lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rq->rq_peer = (const struct sockaddr *)&lo;
    rq->rq_tls = strncmp(url, "https:", 6) == 0;
    if (http_head_scan(&rq->r, head, strlen(head), &wk->limits) != HTTP_OK
        || http_req_parse(&rq->r, head + rq->r.start) != HTTP_OK) {
        buf_printf(out, "error\tthe URL does not make a valid request\n");
        rq->rq_step = REQ_DONE;
        req_free(rq);
        return 1;
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
        int r1 = wk->cache ? cache_remove(wk->cache, rt.key, rt.keylen) : CACHE_MISS;
        if (wk->cache && rt.rule == NULL && rt.keylen > sizeof(FORWARD_SUFFIX) - 1) {
            int r2 = cache_remove(wk->cache, rt.key, rt.keylen - (sizeof(FORWARD_SUFFIX) - 1));
            if (r1 != CACHE_OK && r2 != CACHE_MISS)
                r1 = r2;
        }
        buf_printf(out, "key\t%.*s\npurged\t%s\n", (int)rt.keylen, rt.key,
                   r1 == CACHE_OK ? "true" : "false");
        if (r1 == CACHE_OK)
            log_info("ctl: purged %.*s", (int)rt.keylen, rt.key);
        rc = r1 == CACHE_OK ? 0 : r1 == CACHE_MISS ? 1 : 4;
    }
    rq->rq_step = REQ_DONE;
    req_free(rq);
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
    if (rq->rq_step == REQ_HIT && rww_waiting(rq))
        return;     /* a joiner that sent what the fill has: woken for more */
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
                 && !filltab_busy(w->shm->filltab, rq->whash, (int)w->slotno, now_ms))
            req_wake(rq, 0);
        /* next was read before resuming: a resumed request may have
         * ended, never one further down the list */
    }
    if (!deadlines_only && w->joinq)
        rww_wake_all(w);
}
