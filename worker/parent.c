/*
 * worker/parent.c: parent.config at run time: which parent a request
 * goes to, and where it goes when that one fails (issue 20).
 *
 * A request whose target (after remap) matches a parent.config line is
 * sent to one of the line's parents: with parent_is_proxy=true (ATS's
 * default) in absolute form, as to a proxy; with false in origin form
 * with the origin's Host, the parents being a pool of origin servers.
 * The order to try them is fixed when the request is routed:
 *
 *   consistent_hash  weighted rendezvous hashing of the URL (qstring=ignore
 *                    leaves the query out): the owner first, then the
 *                    rest by score; secondary_parent= ranked the same way,
 *                    after the owner (secondary_mode 1 and 3) or after
 *                    every primary (2)
 *   strict           a rotation shared by every worker (shm)
 *   true             from a hash of the client's address
 *   latched          the latched parent (shm) first
 *   false            file order
 *
 * then, for the rotating modes, secondary_parent= in file order.  Parents
 * marked down (shm/parenttab.h: fail_threshold failures within
 * retry_time, by any worker) are skipped; when retry_time has passed, one
 * request probes it.  A connect failure, or a failure before the response
 * head of a request that can be repeated, or a status in the rule's
 * retry lists (parent_retry=), moves to the next parent at once; after
 * the last (or total_connect_attempts), go_direct=true sends the request
 * to the origin itself, else the client gets the 502 (or a stale copy,
 * stale-if-error).
 *
 * uncacheable_requests_bypass_parent (ATS's default 1): a request that is
 * not a cache lookup goes to its origin, unless the parents are origins
 * (parent_is_proxy=false).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "shm/log.h"
#include "shm/parenttab.h"
#include "worker/worker.h"

static const struct conf_parent_host *
parent_host(const struct upstream *up, int i)
{
    return &up->up_prule->hosts[i];
}

const char *
parent_name(const struct upstream *up)
{
    return up->up_prule && up->up_pidx >= 0 ? parent_host(up, up->up_pidx)->name : NULL;
}

static int
parent_slot(const struct conf_parent_host *h)
{
    return parenttab_find(wk->shm->parenttab, h->name);
}

/* The order of up's parents for this request (up_porder). */
static void
parent_order(struct upstream *up, const struct req *rq, const char *url, size_t urllen)
{
    const struct conf_parent_rule *r = up->up_prule;
    int np = r->nprimary, ns = r->nsecondary, n = 0, start = 0, slot;
    int o1[CONF_PP_MAX_PARENTS], o2[CONF_PP_MAX_PARENTS];

    if (r->rr == CONF_PP_RR_HASH) {
        uint64_t key = conf_parent_hash(url, urllen);
        conf_parent_rank(r->hosts, np, key, o1);
        conf_parent_rank(r->hosts + np, ns, key, o2);
        up->up_porder[n++] = (uint8_t)o1[0];
        if (r->secondary_mode != 2)
            for (int i = 0; i < ns; i++)
                up->up_porder[n++] = (uint8_t)(np + o2[i]);
        for (int i = 1; i < np; i++)
            up->up_porder[n++] = (uint8_t)o1[i];
        if (r->secondary_mode == 2)
            for (int i = 0; i < ns; i++)
                up->up_porder[n++] = (uint8_t)(np + o2[i]);
        up->up_pnorder = n;
        return;
    }
    switch (r->rr) {
    case CONF_PP_RR_TRUE: {
        size_t al;
        const char *a = fmt_peer_text(rq->rq_peer, &al);
        start = (int)(conf_parent_hash(a, al) % (uint64_t)np);
        break;
    }
    case CONF_PP_RR_STRICT:
        if ((slot = parent_slot(&r->hosts[0])) >= 0)
            start = (int)(parenttab_next(wk->shm->parenttab, slot) % (uint64_t)np);
        break;
    case CONF_PP_RR_LATCHED:
        if ((slot = parent_slot(&r->hosts[0])) >= 0)
            start = parenttab_latched(wk->shm->parenttab, slot) % np;
        break;
    default:
        break;
    }
    for (int i = 0; i < np; i++)
        up->up_porder[n++] = (uint8_t)((start + i) % np);
    for (int i = 0; i < ns; i++)
        up->up_porder[n++] = (uint8_t)(np + i);
    up->up_pnorder = n;
}

/* The next parent to try that is not down: up_host/up_port set, 1; or 0
 * when none is left (or total_connect_attempts are spent). */
static int
parent_pick(struct upstream *up)
{
    const struct conf_records *rec = &wk->conf->rec;
    struct parenttab *pt = wk->shm->parenttab;
    time_t now = time(NULL);

    if (up->up_pattempts >= rec->parent_total_attempts)
        return 0;
    while (up->up_ppos < up->up_pnorder) {
        int i = up->up_porder[up->up_ppos++];
        const struct conf_parent_host *h = parent_host(up, i);
        int slot = parent_slot(h), st = PT_UP;

        if ((up->up_ptried >> i) & 1)
            continue;
        if (slot >= 0 && (st = parenttab_usable(pt, slot, now, rec->parent_retry_time)) == PT_DOWN)
            continue;
        if (st == PT_PROBING)
            log_notice("parent %s: retry_time is over; probing it with conn %llu",
                       h->name, (unsigned long long)up->up_req->rq_id);
        up->up_ptried |= (uint64_t)1 << i;
        up->up_pidx = i;
        up->up_pslot = slot;
        snprintf(up->up_host, sizeof(up->up_host), "%s", h->host);
        up->up_port = h->port;
        up->up_https = up->up_prule->is_proxy ? 0 : up->up_ohttps;
        if (slot >= 0) {
            parenttab_request(pt, slot);
            if (up->up_prule->rr == CONF_PP_RR_LATCHED && i < up->up_prule->nprimary) {
                int s0 = parent_slot(&up->up_prule->hosts[0]);
                if (s0 >= 0)
                    parenttab_set_latched(pt, s0, i);
            }
        }
        return 1;
    }
    return 0;
}

/* Cut the Proxy-Authorization lines (any case) out of the head in o: it
 * was written for a parent proxy (forward.proxy_auth_to_parent), and the
 * origin is not that proxy (RFC 9110 11.7.1). */
static void
parent_cut_proxy_auth(struct buf *o)
{
    static const char name[] = "proxy-authorization:";
    size_t n = sizeof(name) - 1, p = 0;

    while (p < o->end) {
        const char *eol = memchr(o->data + p, '\n', o->end - p);
        if (eol == NULL)
            return;
        size_t next = (size_t)(eol - o->data) + 1;
        if (next - p <= 2)
            return;     /* the empty line: the head ends */
        if (next - p > n && strncasecmp(o->data + p, name, n) == 0) {
            memmove(o->data + p, o->data + next, o->end - next);
            o->end -= next - p;
            continue;
        }
        p = next;
    }
}

/* Back to the origin (go_direct): its host, and the request line in
 * origin form. */
static void
parent_go_direct(struct upstream *up)
{
    snprintf(up->up_host, sizeof(up->up_host), "%s", up->up_ohost);
    up->up_port = up->up_oport;
    up->up_https = up->up_ohttps;
    up->up_pidx = -1;
    up->up_pslot = -1;
    if (up->up_pabs && up->up_abslen > 0 && up->up_out.data) {
        struct buf *o = &up->up_out;
        size_t m = strlen(http_method_name(up->up_method)) + 1;
        if (o->end >= m + (size_t)up->up_abslen) {
            memmove(o->data + m, o->data + m + up->up_abslen,
                    o->end - m - (size_t)up->up_abslen);
            o->end -= (size_t)up->up_abslen;
        }
        if (wk->conf->rec.proxy_auth_to_parent)
            parent_cut_proxy_auth(o);
    }
    up->up_pabs = 0;
    up->up_abslen = 0;
}

int
parent_route(struct upstream *up, const struct req *rq,
             const struct conf_remap_result *res, int lookupable, const char **why)
{
    const struct conf *cf = wk->conf;
    char url[8192 + 300];
    int ul = 0;

    up->up_pidx = -1;
    up->up_pslot = -1;
    if (cf->parents.nrules == 0)
        return 0;
    const char *qm = memchr(res->path, '?', res->pathlen);
    /* the URL as ATS (and cache.config) write it: no default port */
    if (res->port == (strcmp(res->scheme, "https") == 0 ? 443 : 80))
        ul = snprintf(url, sizeof(url), "%s://%s%.*s", res->scheme, res->host,
                      (int)res->pathlen, res->path);
    else
        ul = snprintf(url, sizeof(url), "%s://%s:%d%.*s", res->scheme, res->host,
                      res->port, (int)res->pathlen, res->path);
    if (ul < 0 || (size_t)ul >= sizeof(url))
        ul = 0;
    struct conf_parent_req q = {
        .scheme = res->scheme, .host = res->host, .hostlen = strlen(res->host),
        .port = res->port, .path = res->path, .pathlen = res->pathlen,
        .url = ul ? url : NULL, .method = http_method_name(rq->r.method),
        .src = rq->rq_peer,
    };
    const struct conf_parent_rule *r = conf_parent_find(&cf->parents, &q);
    if (r == NULL || r->nprimary == 0)
        return 0;       /* no line, or a go_direct=true line: the origin */
    if (r->is_proxy && cf->rec.uncacheable_bypass_parent && !lookupable)
        return 0;
    up->up_prule = r;
    snprintf(up->up_ohost, sizeof(up->up_ohost), "%s", up->up_host);
    up->up_oport = up->up_port;
    up->up_ohttps = up->up_https;
    if (r->ignore_query && qm && ul)
        ul -= (int)(res->path + res->pathlen - qm);
    parent_order(up, rq, url, ul > 0 ? (size_t)ul : 0);
    if (parent_pick(up)) {
        up->up_pabs = r->is_proxy;
        return 0;
    }
    if (r->go_direct) {
        up->up_pidx = -1;
        return 0;
    }
    log_warn("conn %llu: every parent of parent.config:%d is marked down",
             (unsigned long long)rq->rq_id, r->line);
    up->up_prule = NULL;
    *why = "every parent is marked down";
    return 502;
}

void
parent_failed(struct upstream *up)
{
    const struct conf_records *rec = &wk->conf->rec;
    const struct conf_parent_rule *r = up->up_prule;
    struct parenttab *pt = wk->shm->parenttab;

    if (r == NULL || up->up_pidx < 0 || up->up_pslot < 0)
        return;
    if (parenttab_fail(pt, up->up_pslot, time(NULL), rec->parent_fail_threshold,
                       rec->parent_retry_time))
        log_warn("parent %s marked down for %d s (%d failures)",
                 parent_host(up, up->up_pidx)->name, rec->parent_retry_time,
                 rec->parent_fail_threshold);
    if (r->rr == CONF_PP_RR_LATCHED && up->up_pidx < r->nprimary) {
        int s0 = parent_slot(&r->hosts[0]);
        if (s0 >= 0 && parenttab_latched(pt, s0) == up->up_pidx)
            parenttab_set_latched(pt, s0, (up->up_pidx + 1) % r->nprimary);
    }
}

int
parent_next(struct upstream *up, enum parent_why why)
{
    const struct conf_parent_rule *r = up->up_prule;

    if (r == NULL || up->up_pidx < 0)
        return 0;       /* the origin itself failed: nothing after it */
    if (why != PARENT_SIMPLE)
        parent_failed(up);
    else if (up->up_pslot >= 0)
        parenttab_ok(wk->shm->parenttab, up->up_pslot);   /* it answered */
    if (parent_pick(up))
        return 1;
    if (r->go_direct) {
        log_notice("conn %llu: no parent left for parent.config:%d; go_direct to %s:%d",
                   (unsigned long long)up->up_req->rq_id, r->line, up->up_ohost,
                   up->up_oport);
        parent_go_direct(up);
        return 1;
    }
    return 0;
}

int
parent_status_retry(struct upstream *up, int status)
{
    const struct conf_parent_rule *r = up->up_prule;

    if (r == NULL || up->up_pidx < 0 || r->retry == 0)
        return 0;
    if ((r->retry & CONF_PP_RETRY_SIMPLE) && conf_parent_code(r->simple_codes, status)) {
        if (up->up_psimple >= r->max_simple)
            return 0;
        up->up_psimple++;
        return PARENT_SIMPLE;
    }
    if ((r->retry & CONF_PP_RETRY_UNAVAIL) && conf_parent_code(r->unavail_codes, status)) {
        if (up->up_punavail >= r->max_unavail)
            return 0;
        up->up_punavail++;
        return PARENT_UNAVAIL;
    }
    return 0;
}

void
parent_answered(struct upstream *up)
{
    if (up->up_prule == NULL || up->up_pidx < 0)
        return;
    if (up->up_pslot >= 0)
        parenttab_ok(wk->shm->parenttab, up->up_pslot);
    up->up_req->log.parent = parent_host(up, up->up_pidx)->name;
}
