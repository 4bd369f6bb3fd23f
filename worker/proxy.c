/*
 * worker/proxy.c: one origin transaction (a cache miss, later).
 *
 * Ownership: a struct upstream belongs to exactly one request (rq->rq_up,
 * its FETCH step) and dies with the response: its connection goes back to
 * the pool when the exchange ended cleanly (and carried no body the
 * origin may have left unread: up_body_moot, a body its method gives no
 * meaning or an answer that came before all of it was sent), otherwise
 * it is closed.  It writes only its request's fields; the request's
 * owner (conn.c) is told to write through the owner ops (up_kick: flush,
 * and body_resume).
 *
 * Data flow, with back-pressure both ways and nothing buffered whole:
 *
 *   client --rq_in--> http_body_forward() --raw bytes--> up_out --> origin
 *   origin --> up_in --our parser--> [start, parsed) --rq_body--> client
 *
 * Request bodies are forwarded as the client framed them (http-parser has
 * validated that framing), less the trailer lines no recipient may merge
 * (http_body_forward): at most one up_out buffer is in flight, and the
 * client is not read while it is full.  Response bodies are parsed in
 * place and the parsed span is lent to the request's owner as rq_body
 * (written after rq_out), so body bytes are never copied inside Cistern
 * (a trailer line not forwarded is stepped over, never lent); the origin
 * is not read while up_in is full of bytes the client has not taken.  The
 * one exception is a chunked response to an HTTP/1.0 client, which is
 * de-chunked into the client's output buffer (rq_out).
 *
 * Errors: before any response byte reached the client, a failure becomes
 * a 502 (refused, reset, invalid response) or 504 (timeout) with one log
 * line; after that, the client connection is closed, so a truncated
 * response never looks complete.  A request without a body that is safe
 * to repeat is retried once on a fresh connection when a pooled one turns
 * out to be dead (the origin closed it while it sat idle).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shm/log.h"
#include "shm/filltab.h"
#include "worker/worker.h"
#include "worker/tunnel.h"

/* A response whose length says it is larger than this releases the
 * waiters at once (they fetch for themselves) instead of holding them
 * until the whole body is stored: we serve waiters from the stored
 * object, not read-while-writer. */
#define COLLAPSE_LARGE  (1024 * 1024)
#define RWW_STEP        (64u << 10)  /* joiners are woken every this many bytes */

static void proxy_rww_grew(struct upstream *up);
static void proxy_rww_end(struct upstream *up, int state);
static void proxy_bg_orphan(struct upstream *up);
/* How long a URL that answered uncacheable skips the fill table
 * (Varnish's hit-for-miss). */
#define PASS_MS         10000

static void up_on_read(evutil_socket_t fd, short what, void *arg);
static void up_on_write(evutil_socket_t fd, short what, void *arg);
static void up_send(struct upstream *up);
static enum wk_rc proxy_pump_body(struct req *rq, struct upstream *up);

/* Head writers.  The heads we forward are built with plain copies
 * (buf.h's appenders): a printf per line cost a fifth of a proxied
 * request (callgrind). */

/* A field line as received (name, colon, whitespace, value), with CRLF. */
static int
buf_put_field(struct buf *b, const struct http_req *r, const struct http_field *f)
{
    size_t n = f->value + f->value_len - f->name;

    if (b->size - b->end < n + 2 && buf_grow(b, n + 2) < 0)
        return -1;
    memcpy(b->data + b->end, r->base + f->name, n);
    memcpy(b->data + b->end + n, "\r\n", 2);
    b->end += n + 2;
    return 0;
}

/* "Content-Length: n\r\n": the value framed by, never a field's spelling
 * of it (RFC 9110 8.6 allows "042", which some parsers read as octal). */
static int
buf_put_length(struct buf *b, int64_t n)
{
    char d[24];
    int err = buf_lit(b, "Content-Length: ");

    err |= buf_append(b, d, (size_t)(fmt_i64(d, n) - d));
    return err | buf_lit(b, "\r\n");
}

/* A response's Content-Length f: the one value it was framed by
 * (http_req_framing); a HEAD's or a 304's, not framing, likewise
 * (http-parser saw 1*DIGIT), or nothing past INT64_MAX. */
static int
buf_put_resp_length(struct buf *b, const struct http_req *resp, const struct http_field *f)
{
    int64_t n = resp->content_length >= 0 ? resp->content_length
                                          : http_decimal(resp->base + f->value, f->value_len);

    return n >= 0 ? buf_put_length(b, n) : 0;
}

/* "HTTP/1.1 <status> <phrase>\r\n" of resp (the status has three digits,
 * http_resp_parse saw to that). */
static int
buf_put_status(struct buf *b, const struct http_req *resp)
{
    char line[] = "HTTP/1.1 000 ";

    line[9] = (char)('0' + resp->status / 100);
    line[10] = (char)('0' + resp->status / 10 % 10);
    line[11] = (char)('0' + resp->status % 10);
    if (buf_append(b, line, sizeof(line) - 1) < 0
        || buf_append(b, resp->base + resp->phrase, resp->phrase_len) < 0)
        return -1;
    return buf_lit(b, "\r\n");
}

/* ------------------------------------------------------------------ */

_Static_assert(sizeof(((struct conf_remap_result *)0)->scheme) >= 6,
               "proxy_start compares 6 bytes of the scheme");
_Static_assert(offsetof(struct upstream, up_key) + sizeof(((struct upstream *)0)->up_key)
               == sizeof(struct upstream), "up_key stays last: up_get() does not zero it");
_Static_assert(offsetof(struct upstream, up_fill)
               - (offsetof(struct upstream, up_cond) + sizeof(struct store_cond))
               < sizeof(void *), "up_get() skips only up_cond between its two memsets");

/* Have the request's owner write what we queued (and pump us again):
 * the one way up.  Returns 0, or -1 when the owner closed. */
static int
up_kick(struct req *rq)
{
    return rq->rq_ops->flush(rq);
}

static struct upstream *
up_get(void)
{
    struct upstream *up;

    if ((up = pool_get(&wk->up_pool)) == NULL)
        return NULL;
    /* All but the two big arrays, which proxy_start() writes before use
     * (store_cond_from() fills up_cond; up_keylen says how much of up_key
     * is valid): zeroing them cost more than the rest of the setup. */
    memset(up, 0, offsetof(struct upstream, up_cond));
    memset(&up->up_fill, 0, offsetof(struct upstream, up_key) - offsetof(struct upstream, up_fill));
    up->up_magic = UP_MAGIC;
    up->up_fd = -1;
    return up;
}

/* The timer for a wait on the origin: transaction_no_activity_timeout_out,
 * cut to what is left of transaction_active_timeout_out when one is set.
 * Returns 0, or -1 when the active timeout has passed already. */
static int
up_timer(const struct upstream *up, struct timeval *tv)
{
    struct timeval now, left;

    tv->tv_sec = wk->conf->rec.txn_no_activity_out;
    tv->tv_usec = 0;
    if (!evutil_timerisset(&up->up_deadline))
        return 0;
    event_base_gettimeofday_cached(wk->base, &now);
    if (evutil_timercmp(&up->up_deadline, &now, <=))
        return -1;
    evutil_timersub(&up->up_deadline, &now, &left);
    if (evutil_timercmp(&left, tv, <))
        *tv = left;
    return 0;
}

static void
up_free(struct req *rq)
{
    struct upstream *up = rq->rq_up;

    if (up == NULL)
        return;
    origin_release(up);
    store_fill_end_part(&up->up_fill, &up->up_old, 0);
    proxy_rww_end(up, RWW_FAILED);
    proxy_release_claim(up, 0);
    buf_release(&up->up_in);
    buf_release(&up->up_out);
    pool_put(&wk->head_pool, up->up_resp);
    up->up_magic = 0;
    rq->rq_up = NULL;
    rq->rq_body_owned = 0;
    rq->rq_body = NULL;
    rq->rq_body_len = 0;
    pool_put(&wk->up_pool, up);
}

/* Answer the client with an error of ours and drop the transaction.
 * Only valid before any response byte went to the client. */
static enum wk_rc proxy_serve_stale(struct req *rq, struct upstream *up, int status);
static enum wk_rc proxy_answer_held(struct req *rq, const struct store_cond *cond,
                                         int ka, const char *cs, const char *hdr,
                                         size_t hdrlen);

static void
proxy_error(struct req *rq, int status, const char *body)
{
    struct upstream *up = rq->rq_up;

    /* A 403 is ip_allow refusing the origin (out rules): a policy answer,
     * not an origin failure, so no stale copy stands in for it. */
    if (status != 403 && store_stale_on_error(rq)) {
        wk->ctr->origin_errors++;
        metrics_ohost_count(up, SHM_OH_ERR);
        proxy_serve_stale(rq, up, 0);
        return;
    }
    int ka = up->up_client_ka && !up->up_req_body && !worker_closing();
    void (*answer)(struct req *) = up->up_answer;

    if (status != 403) {
        wk->ctr->origin_errors++;
        metrics_ohost_count(up, SHM_OH_ERR);
    }
    up_free(rq);
    memset(&rq->syn, 0, sizeof(rq->syn));
    rq->syn.status = status;
    rq->syn.body = body;
    rq->syn.result = status == 504 ? "ERR_READ_TIMEOUT"
                   : status == 403 ? "TCP_DENIED" : "ERR_CONNECT_FAIL";
    rq->syn.close = !ka;
    answer(rq);     /* the request makes our answer (SYNTH), then DONE */
}

size_t
proxy_pristine_host(const struct http_req *r, char *out, size_t outlen)
{
    const char *v;
    size_t n;
    int def = r->https ? 443 : 80;

    if (r->absolute) {
        /* RFC 9112 3.2.2: the target's authority replaces Host */
        v = r->base + r->host;
        n = r->host_len;
    } else if (r->f_host >= 0) {
        v = r->base + r->fields[r->f_host].value;
        n = r->fields[r->f_host].value_len;
        def = -1;   /* as received, port and all */
    } else {
        return 0;
    }
    if (n + 8 > outlen)
        return 0;
    memcpy(out, v, n);
    if (def >= 0 && r->port != def) {
        out[n++] = ':';
        n = (size_t)(fmt_u64(out + n, (uint64_t)r->port) - out);
    }
    out[n] = '\0';
    return n;
}

/* A Range miss the whole object will not be fetched for (range.write 0):
 * the range goes to the origin and its 206 is stored as a part under the
 * part key (RFC 9111 3.3), a 200 as the whole object.  A miss for which
 * req.c holds a stored part that store_part_plan can complete (with or
 * without Range) asks only for the rest (up_cpl_on): its 206 is stored
 * combined with the part, a 200 as the whole object. */
static void
proxy_part_begin(struct upstream *up, const struct http_req *r, const char *key, size_t keylen)
{
    struct req *rq = up->up_req;
    int cpl = rq->obj_held && rq->obj.meta.status == 206 && store_part_plan(rq, &up->up_cpl);

    if (!key || (up->up_store && !cpl) || r->method != HTTP_GET || r->has_body
        || !rq->rq_pol.cache || (!cpl && http_field_find_id(r, HTTP_F_RANGE, 0) < 0)
        || http_field_find_id(r, HTTP_F_IF_RANGE, 0) >= 0
        || keylen + STORE_PART_SUFFIX_LEN > sizeof(up->up_key)
        || (http_req_no_store(r) && !rq->rq_pol.ign_client_nc)) {
        if (rq->obj_held && rq->obj.meta.status == 206)
            store_release(rq);
        return;
    }
    memcpy(up->up_key + keylen, STORE_PART_SUFFIX, STORE_PART_SUFFIX_LEN);
    up->up_keylen = keylen + STORE_PART_SUFFIX_LEN;
    up->up_store = up->up_part = 1;
    up->up_req_auth = http_field_find_id(r, HTTP_F_AUTHORIZATION, 0) >= 0;
    up->up_cpl_on = cpl;
    if (cpl)
        up->up_cstatus = "partial";     /* RFC 9211 2.2: to complete a part */
}

/* The transaction's fields, from the request and its route. */
static void
up_setup(struct upstream *up, struct req *rq, const struct conf_remap_result *res,
         const struct conf_remap_rule *rule, int https, int keep_alive,
         const char *key, size_t keylen, const char *fwd)
{
    const struct http_req *r = &rq->r;
    const struct conf_records *rec = &wk->conf->rec;
    size_t hl = strnlen(res->host, sizeof(up->up_host) - 1);
    struct timeval now;

    rq->rq_up = up;
    up->up_req = rq;
    up->up_rule = rule;
    memcpy(up->up_host, res->host, hl);
    up->up_host[hl] = '\0';
    up->up_port = res->port;
    up->up_https = https;
    up->up_method = r->method;
    up->up_client_minor = r->minor;
    up->up_client_ka = keep_alive;
    up->up_req_body = r->has_body;
    /* RFC 9110 9.3: content on these has no defined meaning, and some
     * origins never read it (Python's http.server): the body is then the
     * next request on the connection, whose answer a pooled connection
     * would give the next client (CL.0 desync).  Rare: such a connection
     * is used once. */
    up->up_body_moot = r->has_body
                       && (r->method == HTTP_GET || r->method == HTTP_HEAD
                           || r->method == HTTP_DELETE || r->method == HTTP_OPTIONS
                           || r->method == HTTP_TRACE);
    up->up_cstatus = fwd;
    store_cond_from(&up->up_cond, r);
    event_base_gettimeofday_cached(wk->base, &now);
    up->up_req_time = now.tv_sec;
    up->up_purge_gen = wk->cache ? cache_purge_gen(wk->cache) : 0;
    if (rec->txn_active_out > 0) {
        up->up_deadline = now;
        up->up_deadline.tv_sec += rec->txn_active_out;
    }
    if (key && keylen <= sizeof(up->up_key)) {
        /* kept for every method: an unsafe one invalidates the URL */
        memcpy(up->up_key, key, keylen);
        up->up_keylen = keylen;
    }
    int range_pass = http_field_find_id(r, HTTP_F_RANGE, 0) >= 0 && !rec->range_write;
    if (key && r->method == HTTP_GET && keylen <= sizeof(up->up_key) && !range_pass
        && !r->has_body && !rq->rq_pol.cache) {
        up->up_cdetail = "config";      /* cache.http 0, cache.config never-cache */
    } else if (key && r->method == HTTP_GET && keylen <= sizeof(up->up_key) && !range_pass
        && !r->has_body) {
        up->up_store = 1;
        up->up_req_auth = http_field_find_id(r, HTTP_F_AUTHORIZATION, 0) >= 0;
        /* The request forbids storing what answers it (RFC 9111 5.2.1.5),
         * unless ignore_client_no_cache says otherwise. */
        if (http_req_no_store(r) && !rq->rq_pol.ign_client_nc) {
            up->up_store = 0;
            up->up_cdetail = "request-no-store";
        }
    } else if (key && r->has_body && (r->method == HTTP_GET || r->method == HTTP_HEAD)) {
        up->up_cdetail = "request-body";
    }
    proxy_part_begin(up, r, key, keylen);
    up->up_safe = !r->has_body
                  && (r->method == HTTP_GET || r->method == HTTP_HEAD
                      || r->method == HTTP_OPTIONS || r->method == HTTP_TRACE
                      || r->method == HTTP_PUT || r->method == HTTP_DELETE);
    up->up_reval = rq->obj_held && !up->up_cpl_on && r->method == HTTP_GET;
}

/* Field i of the client's request, as the origin gets it (or not):
 * hop-by-hop fields, our own credentials, Host and Expect never; the
 * client's validators not while we revalidate; Range not for a fill;
 * Accept-Encoding normalised; X-Forwarded-For later, merged (*xff). */
static int
proxy_put_field(struct buf *o, const struct upstream *up, const struct http_req *r, int i,
                int mfi, int64_t mf, int *xff, int *cip)
{
    const struct conf_records *rec = &wk->conf->rec;
    const struct http_field *f = &r->fields[i];
    int err = 0;

    if (http_field_hop(r, i))
        return 0;       /* Transfer-Encoding too: see proxy_put_head */
    if (i == mfi && mf > 0) {
        /* RFC 9110 7.6.2: one hop fewer */
        char d[24];
        err |= buf_lit(o, "Max-Forwards: ");
        err |= buf_append(o, d, (size_t)(fmt_i64(d, mf - 1) - d));
        return err | buf_lit(o, "\r\n");
    }
    if (f->id == HTTP_F_OTHER && http_field_is(r, i, "proxy-authorization")
        && !(up->up_pabs && rec->proxy_auth_to_parent))
        return 0;   /* credentials for us, the proxy (RFC 9110 11.7.1), or
                       for the parent proxy with forward.proxy_auth_to_parent */
    if (f->id == HTTP_F_OTHER && f->name_len == 9 && http_field_is(r, i, "client-ip")) {
        *cip = 1;   /* insert_client_ip 2 replaces the client's */
        if (rec->insert_client_ip == 2)
            return 0;
    }
    switch (f->id) {
    case HTTP_F_HOST:   /* written already */
    case HTTP_F_EXPECT: /* ours to answer */
        return 0;
    case HTTP_F_CONTENT_LENGTH:     /* the one value (http_req_framing) */
        return buf_put_length(o, r->content_length);
    case HTTP_F_IF_NONE_MATCH:
    case HTTP_F_IF_MODIFIED_SINCE:
        /* Revalidating: our validators replace the client's (its own
         * conditions are answered by us from the refreshed object). */
        if (up->up_reval)
            return 0;
        break;
    case HTTP_F_RANGE:
    case HTTP_F_IF_RANGE:
        /* A range we will store whole is asked for whole; completing a
         * part, ours replaces the client's (proxy_put_head). */
        if ((up->up_store && !up->up_part) || up->up_cpl_on)
            return 0;
        break;
    case HTTP_F_ACCEPT_ENCODING:
        if (rec->normalize_ae && (r->method == HTTP_GET || r->method == HTTP_HEAD)) {
            /* every line as one list, once, at the first: the value the
             * cache key's Vary part is made of (variant.c) */
            if (http_field_find_id(r, HTTP_F_ACCEPT_ENCODING, 0) != i)
                return 0;
            const char *ae = store_norm_ae_req(r, rec->normalize_ae);
            if (*ae) {
                err |= buf_lit(o, "Accept-Encoding: ");
                err |= buf_puts(o, ae);
                err |= buf_lit(o, "\r\n");
            }
            return err;
        }
        break;
    case HTTP_F_X_FORWARDED_FOR:
        if (!rec->insert_xff)
            break;      /* passed on as the client sent it */
        if (*xff < 0)
            *xff = i;    /* merged later, with the client's address last */
        return 0;
    default:
        break;
    }
    return buf_put_field(o, r, f);
}

/* The request head, rewritten for the origin, into up_out.  0, or -1
 * when it does not fit. */
static int
proxy_put_head(struct upstream *up, struct req *rq, const struct conf_remap_result *res)
{
    const struct http_req *r = &rq->r;
    struct buf *o = &up->up_out;
    const struct conf_records *rec = &wk->conf->rec;
    char ph[300];
    size_t phl, ipl;
    int xff = -1, cip = 0, err = 0, mfi;
    size_t mark = o->end;

    int https = memcmp(res->scheme, "https", 6) == 0;

    err |= buf_puts(o, http_method_name(r->method));
    err |= buf_lit(o, " ");
    if (up->up_pabs) {
        /* to a parent proxy: absolute form (go_direct cuts it again) */
        size_t m = o->end;
        err |= buf_puts(o, https ? "https://" : "http://");
        err |= buf_puts(o, res->host);
        if (res->port != (https ? 443 : 80)) {
            err |= buf_lit(o, ":");
            err |= buf_putu(o, (unsigned)res->port);
        }
        up->up_abslen = (int)(o->end - m);
    }
    err |= buf_append(o, res->path, res->pathlen);
    err |= buf_lit(o, " HTTP/1.1\r\nHost: ");
    if (wk->conf->rec.pristine_host_hdr
        && (phl = proxy_pristine_host(r, ph, sizeof(ph))) > 0) {
        /* (the cache key carries the same value: see req.c's req_key) */
        err |= buf_append(o, ph, phl);
    } else {
        err |= buf_puts(o, res->host);
        if (res->port != (https ? 443 : 80)) {
            err |= buf_lit(o, ":");
            err |= buf_putu(o, (unsigned)res->port);
        }
    }
    err |= buf_lit(o, "\r\n");
    int64_t mf = http_max_forwards(r, &mfi);   /* 0 was answered by us */
    if (rq->rq_plugged)
        plug_send_request(rq);
    for (int i = 0; i < r->nfields; i++)
        if (!rq->rq_plugged || !plug_req_removed(rq, i))
            err |= proxy_put_field(o, up, r, i, mfi, mf, &xff, &cip);
    if (rq->rq_plugged)     /* the fields the plugins added */
        err |= buf_append(o, rq->rq_plug.req.add, rq->rq_plug.req.addlen);
    if (r->fidx[HTTP_F_UPGRADE] && !up->up_https) {
        int k = tunnel_put_upgrade(rq, o);      /* a 101 then tunnels */
        up->up_upgrade = k > 0;
        err |= k < 0;
    }
    /* The body goes out as the client framed it: chunked. */
    if (r->chunked)
        err |= buf_lit(o, "Transfer-Encoding: chunked\r\n");
    if (up->up_reval && !store_validators(rq, o))
        up->up_reval = 0;   /* nothing to validate with: a plain fetch */
    const char *ip = fmt_peer_text(rq->rq_peer, &ipl);
    /* ATS's insert_client_ip: 1 unless the client sent one, 2 always */
    if (rec->insert_client_ip == 2 || (rec->insert_client_ip == 1 && !cip)) {
        err |= buf_lit(o, "Client-ip: ");
        err |= buf_append(o, ip, ipl);
        err |= buf_lit(o, "\r\n");
    }
    /* Every X-Forwarded-For line, in order, then the client (one line). */
    if (rec->insert_xff) {
        err |= buf_lit(o, "X-Forwarded-For: ");
        for (int i = xff; i >= 0 && i < r->nfields; i++) {
            const struct http_field *f = &r->fields[i];
            if (f->id == HTTP_F_X_FORWARDED_FOR && f->value_len > 0 && !http_field_hop(r, i)) {
                err |= buf_append(o, r->base + f->value, f->value_len);
                err |= buf_lit(o, ", ");
            }
        }
        err |= buf_append(o, ip, ipl);
        err |= buf_lit(o, "\r\n");
    }
    /* Forwarded's host=: the authority routed and keyed by, not a Host
     * line the absolute form overrides */
    phl = (rec->insert_forwarded & CONF_FWD_HOST) ? proxy_pristine_host(r, ph, sizeof(ph)) : 0;
    err |= via_put_forwarded(o, r, ph, phl, rq->rq_peer, rq->rq_tls);
    if (rec->via_req_level > 0) {
        char via[VIA_MAX], codes[VIA_CODES + 1], *c = NULL;
        if (rec->via_req_level >= 2) {
            via_codes_init(codes, r);
            via_codes_lookup(codes, up->up_cstatus, up->up_reval);
            c = codes;
        }
        err |= buf_append(o, via, via_format(via, 0, rq->rq_tls, r->minor, c));
    }
    if (up->up_cpl_on) {
        up->up_cpl_off = o->end;        /* last: proxy_cpl_refetch cuts it */
        err |= store_cpl_put_range(rq, &up->up_cpl, o);
    }
    err |= buf_lit(o, "\r\n");
    if (!err)
        alog_oreq(rq, o->end - mark, 0);
    return err ? -1 : 0;
}

int
proxy_start(struct req *rq, const struct conf_remap_result *res,
            const struct conf_remap_rule *rule, int keep_alive,
            const char *key, size_t keylen, const char *fwd,
            void (*answer)(struct req *), const char **why)
{
    const struct http_req *r = &rq->r;
    struct upstream *up;

    /* (res->scheme is a char[8]: the compares are two loads each) */
    int https = memcmp(res->scheme, "https", 6) == 0;

    if (!https && memcmp(res->scheme, "http", 5) != 0) {
        *why = "unsupported origin scheme";
        return 502;
    }
    if ((up = up_get()) == NULL || buf_alloc(&up->up_out) < 0) {
        pool_put(&wk->up_pool, up);
        *why = "out of memory";
        return 503;
    }
    up_setup(up, rq, res, rule, https, keep_alive, key, keylen, fwd);
    up->up_answer = answer;
    /* a plugin may answer in the origin's place (an intercept) */
    int icpt = rq->rq_plugged ? plug_intercept(rq, up, proxy_origin_ready,
                                               proxy_origin_attach) : 0;
    if (icpt < 0) {
        proxy_error(rq, 502, "the intercepting plugin failed");
        return 0;
    }
    if (!icpt && parent_route(up, rq, res, key != NULL && (r->method == HTTP_GET
                                                  || r->method == HTTP_HEAD), why)) {
        proxy_error(rq, 502, *why);
        return 0;
    }
    if (proxy_put_head(up, rq, res) < 0) {
        proxy_error(rq, 502, "request too large to forward");
        return 0;       /* answered (or served stale): the transaction is over */
    }
    if (r->has_body && r->expect_continue) {
        /* We read the body ourselves; the client may send it now. */
        buf_alloc(rq->rq_out);
        if (buf_lit(rq->rq_out, "HTTP/1.1 100 Continue\r\n\r\n") == 0)
            resp_count_interim(rq);
    }
    wk->ctr->origin_requests++;
    metrics_ohost_count(up, SHM_OH_REQ);
    if (rq->rq_ostart == 0)
        rq->rq_ostart = metrics_now();
    rq->rq_body_owned = r->has_body;
    if (icpt)
        proxy_origin_ready(up, 0);      /* connected to the plugin already */
    else
        origin_get(up, 1, proxy_origin_ready, proxy_origin_attach);
    return 0;
}

/* up has its connection: set up its events and watch for the response
 * (an early answer, or the close of a dead pooled connection). */
void
proxy_origin_attach(struct upstream *up)
{
    struct worker *w = wk;

    event_assign(&up->up_rev, w->base, up->up_fd, EV_READ | EV_PERSIST, up_on_read, up);
    event_assign(&up->up_wev, w->base, up->up_fd, EV_WRITE | EV_PERSIST, up_on_write, up);
    /* no timeout yet: up_send() arms it whichever way it ends */
    event_add(&up->up_rev, NULL);
    up->up_state = UP_SENDING;
}

/* A new attempt at the request in up_out (kept until the response head
 * is taken), on another connection: whatever came back is dropped. */
static void
up_again(struct upstream *up)
{
    origin_release(up);
    if (up->up_resp)
        http_req_reset(up->up_resp);
    up->up_in.start = up->up_in.end = 0;
    up->up_parsed = 0;
    up->up_out.start = 0;
    up->up_state = 0;
    up->up_req_done = 0;
    up->up_eof = 0;
    up->up_resp_bytes = 0;
    up->up_reused = 0;
    up->up_retried = 0;
    up->up_unsent = 0;
    origin_get(up, 1, proxy_origin_ready, proxy_origin_attach);
}

/* The attempt on up failed before any response byte reached the client
 * (why: a failure, or a status the rule retries): with parent.config, on
 * to the next parent (or the origin, go_direct) at once when the request
 * can be sent again: nothing of it sent yet, or safe and without a body
 * (its bytes are kept in up_out until the response head).  1 when a new
 * attempt runs. */
static int
proxy_parent_again(struct upstream *up, enum parent_why why)
{
    if (up->up_prule == NULL || up->up_pidx < 0)
        return 0;
    if (!up->up_safe && up->up_state >= UP_SENDING) {
        if (why != PARENT_SIMPLE)
            parent_failed(up);
        return 0;
    }
    if (!parent_next(up, why))
        return 0;
    log_info("conn %llu: trying %s:%d next", (unsigned long long)up->up_req->rq_id,
             up->up_host, up->up_port);
    up_again(up);
    return 1;
}

/* The connection is ready (err 0), or could not be had. */
void
proxy_origin_ready(struct upstream *up, int err)
{
    struct req *rq = up->up_req;

    if (err && err != 403 && proxy_parent_again(up, PARENT_FAIL))
        return;
    if (err) {
        origin_release(up);
        proxy_error(rq, err, err == 504 ? "origin connect timeout"
                             : err == 403 ? "access to the origin denied by ip_allow"
                             : "origin unreachable");
        up_kick(rq);
        return;
    }
    /* UP_SENDING: origin_get() attached a pooled connection already */
    if (up->up_state != UP_SENDING)
        proxy_origin_attach(up);
    up_send(up);
}

/* A pooled connection died under us: try once more on a fresh one. */
static int
up_retry(struct upstream *up)
{
    if (!up->up_reused || !up->up_safe || up->up_retried || up->up_resp_bytes)
        return 0;
    log_debug("conn %llu: pooled origin connection to %s:%d was dead; retrying",
              (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port);
    origin_release(up);
    up->up_retried = 1;
    up->up_out.start = 0;
    up->up_req_done = 0;
    up->up_eof = 0;
    origin_get(up, 0, proxy_origin_ready, proxy_origin_attach);
    return 1;
}

/* Origin failure: 502/504 if the client has seen nothing, else cut it. */
static void
up_fail(struct upstream *up, int status, const char *why)
{
    struct req *rq = up->up_req;

    log_warn("conn %llu: origin %s:%d: %s", (unsigned long long)rq->rq_id,
             up->up_host, up->up_port, why);
    if (up->up_state == UP_BODY) {
        wk->ctr->origin_errors++;
        metrics_ohost_count(up, SHM_OH_ERR);
        rq->rq_abort = 1;
        up_kick(rq);
        return;
    }
    if (proxy_parent_again(up, PARENT_FAIL))
        return;
    proxy_error(rq, status, status == 504 ? "origin timeout" : "bad gateway");
    up_kick(rq);
}

static void
up_send(struct upstream *up)
{
    struct buf *o = &up->up_out;
    struct timeval tv;

    if (up_timer(up, &tv) < 0) {
        up_fail(up, 504, "transaction_active_timeout_out");
        return;
    }

    while (o->end > o->start) {
        ssize_t n = up->up_tls ? tls_origin_write(up, o->data + o->start, o->end - o->start)
                               : write(up->up_fd, o->data + o->start, o->end - o->start);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN) {
                event_add(&up->up_wev, &tv);
                event_add(&up->up_rev, &tv);
                up->up_unsent = sock_unsent(up->up_fd);
                return;
            }
            if (up_retry(up))
                return;
            up_fail(up, 502, strerror(errno));
            return;
        }
        o->start += (size_t)n;
    }
    event_del(&up->up_wev);
    if (!up->up_req_body || !up->up_req->rq_body_owned) {
        up->up_req_done = 1;
        if (up->up_state == UP_SENDING)
            up->up_state = UP_HEAD;
        if (up->up_req_body)
            up->up_unsent = sock_unsent(up->up_fd);
    }
    /* Keep the request bytes for a retry until the response begins. */
    if (!up->up_safe)
        o->start = o->end = 0;
    if (up->up_req_body && up->up_req->rq_body_owned) {
        /* The origin has all we have: we wait for the client's body, and
         * its timer runs (a 408 if it stalls), not the origin's (still
         * read: it may answer early). */
        event_remove_timer(&up->up_rev);
        event_add(&up->up_rev, NULL);
    } else {
        event_add(&up->up_rev, &tv);
    }
    if (up->up_req_body && up->up_req->rq_body_owned) {
        o->start = o->end = 0;
        up->up_req->rq_ops->body_resume(up->up_req);
    }
}

/* A timer of up fired while the request was still going out, or still
 * sat in the kernel's buffer (a large body is "sent" seconds before the
 * origin has read it): if the origin has been taking it all along (its
 * unacknowledged bytes shrank), it is not silent, only slower than our
 * view through that buffer; start the timers again and return 1. */
static int
up_still_taking(struct upstream *up)
{
    struct timeval tv;
    int q;

    if (up_timer(up, &tv) < 0)
        return 0;
    q = sock_unsent(up->up_fd);
    if (q < 0 || up->up_unsent < 0 || q >= up->up_unsent)
        return 0;
    up->up_unsent = q;
    if (event_pending(&up->up_wev, EV_WRITE, NULL))
        event_add(&up->up_wev, &tv);
    event_add(&up->up_rev, &tv);
    return 1;
}

static void
up_on_write(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;

    magic_check(up->up_magic, UP_MAGIC);
    if (what & EV_TIMEOUT) {
        if (up_still_taking(up))
            return;
        up_fail(up, 504, "timeout sending the request");
        return;
    }
    up_send(up);
}

static void
up_on_read(evutil_socket_t fd, short what, void *arg)
{
    struct upstream *up = arg;
    struct req *rq;

    magic_check(up->up_magic, UP_MAGIC);
    rq = up->up_req;
    struct buf *in = &up->up_in;
    ssize_t n;

    struct timeval tv;

    if (up_timer(up, &tv) < 0) {
        up_fail(up, 504, "transaction_active_timeout_out");
        return;
    }
    if (what & EV_TIMEOUT) {
        if (up_still_taking(up))
            return;
        up_fail(up, 504, "no response within transaction_no_activity_timeout_out");
        return;
    }
    if (evutil_timerisset(&up->up_deadline))
        event_add(&up->up_rev, &tv);    /* the cap comes nearer */
    if (buf_alloc(in) < 0) {
        up_fail(up, 502, "out of memory");
        return;
    }
    if (in->end == in->size) {
        if (in->start > 0 && rq->rq_body_len == 0
            && (in->start == up->up_parsed || up->up_state != UP_BODY)) {
            /* (before the body, only interim responses were consumed) */
            size_t keep = in->end - in->start;
            memmove(in->data, in->data + in->start, keep);
            in->end = keep;
            up->up_parsed = up->up_state == UP_BODY ? up->up_parsed - in->start : 0;
            in->start = 0;
        } else if (up->up_state == UP_HEAD && in->start == 0
                   && in->size < (size_t)wk->conf->rec.response_header_max_size + BUF_SIZE) {
            buf_grow(in, BUF_SIZE);
        }
        if (in->end == in->size && up->up_state != UP_BODY && rq->rq_body_len == 0
            && rq->rq_out->end == rq->rq_out->start) {
            /* A head that fills the largest buffer and is still not whole:
             * no client is holding us back, so waiting cannot help. */
            up_fail(up, 502, "response head too large");
            return;
        }
        if (in->end == in->size) {
            /* The client has not taken what we have: stop reading. */
            event_del(&up->up_rev);
            return;
        }
    }
    if (up->up_tls)
        n = tls_origin_read(up, in->data + in->end, in->size - in->end);
    else
        n = read(fd, in->data + in->end, in->size - in->end);
    if (n < 0) {
        if (errno == EAGAIN || errno == EINTR)
            return;
        if (up_retry(up))
            return;
        up_fail(up, 502, strerror(errno));
        return;
    }
    if (n == 0) {
        if (up_retry(up))
            return;
        up->up_eof = 1;
        event_del(&up->up_rev);
    } else {
        up->up_more = up->up_tls || (size_t)n == in->size - in->end;
        in->end += (size_t)n;
        up->up_resp_bytes = 1;
    }
    up_kick(rq);
}

/* ------------------------------------------------------------------ */
/* Completing a stored part (store_part_plan; DESIGN.md "Partial
 * content"): the origin was asked for the piece missing from what the
 * client wants; its 206 combines with the part rq->obj holds, whose
 * bytes are lent from the mapping (up_lent) before or after the
 * origin's.  Anything else but a 206 is answered as any miss's. */

/* The status line and framing of a completed part's answer. */
static int
proxy_cpl_head(struct buf *o, const struct store_cpl *cp)
{
    if (cp->whole)
        return buf_printf(o, "HTTP/1.1 200 OK\r\nContent-Length: %llu\r\n",
                          (unsigned long long)cp->n);
    return buf_printf(o, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %llu-%llu/%llu\r\n"
                      "Content-Length: %llu\r\n", (unsigned long long)cp->ca,
                      (unsigned long long)cp->cb, (unsigned long long)cp->n,
                      (unsigned long long)(cp->cb - cp->ca + 1));
}

/* The origin's 206 does not combine with the part (no strong ETag to
 * prove it the same representation, another one, another range or
 * length, several ranges): the client must never get two
 * representations in one body.  The request goes again without our
 * Range (with the client's own, if it sent one) on another connection,
 * and is answered and stored as any miss.  1 when it goes. */
static int
proxy_cpl_refetch(struct upstream *up)
{
    struct buf *o = &up->up_out;
    int err = 0;

    log_info("conn %llu: origin %s:%d: its 206 does not complete the stored part; "
             "fetching again", (unsigned long long)up->up_req->rq_id, up->up_host, up->up_port);
    store_release(up->up_req);
    up->up_cpl_on = 0;
    up->up_cstatus = "miss";
    o->end = up->up_cpl_off;    /* our Range was last: cut it */
    if (up->up_cond.range[0]) {
        err |= buf_lit(o, "Range: ");
        err |= buf_puts(o, up->up_cond.range);
        err |= buf_lit(o, "\r\n");
    } else {
        up->up_part = 0;        /* a whole fetch, for the object's key */
        up->up_keylen -= STORE_PART_SUFFIX_LEN;
    }
    if ((err | buf_lit(o, "\r\n")) != 0)
        return 0;
    wk->ctr->origin_requests++;
    metrics_ohost_count(up, SHM_OH_REQ);
    up_again(up);
    return 1;
}

/* Lend the part's body bytes [pos, end) as the answer's next bytes.
 * 0, or -1 when the mapping gives none (the answer must be cut). */
static int
proxy_cpl_lend(struct req *rq, struct upstream *up, uint64_t pos, uint64_t end)
{
    rq->rq_hit_pos = pos;
    rq->rq_hit_end = end;
    alog_bytes(rq, end - pos);
    if (up)
        up->up_lent = 1;
    return store_body_more(rq) ? 0 : -1;
}

/* The response head for the client: hop-by-hop fields out, Via in,
 * Location / Content-Location mapped back (reverse_map), framing chosen
 * for this client. */
static int
proxy_client_head(struct req *rq, struct upstream *up, struct http_req *resp)
{
    struct buf *o = rq->rq_out;
    const struct conf_records *rec = &wk->conf->rec;
    char mapped[8192];
    int has_date = 0, has_server = 0, ka, err = 0;

    if (buf_alloc(o) < 0)
        return -1;
    size_t mark = o->end;
    /* a completed part: our status and framing (store_cpl_joins saw to a
     * Content-Length), the origin's other fields (RFC 9111 3.4) */
    int join = up->up_cpl_join, st = join ? (up->up_cpl.whole ? 200 : 206) : resp->status;
    up->up_decode = resp->chunked && (up->up_client_minor == 0 || rq->rq_h2)
                    && !resp->skip_body;
    ka = up->up_client_ka && !resp->until_close && !up->up_decode && !worker_closing()
         && !(up->up_req_body && !up->up_req_done);
    err |= join ? proxy_cpl_head(o, &up->up_cpl) : buf_put_status(o, resp);
    for (int i = 0; i < resp->nfields; i++) {
        const struct http_field *f = &resp->fields[i];
        const char *v = resp->base + f->value;

        if (http_field_hop(resp, i)
            || (join && (f->id == HTTP_F_CONTENT_RANGE || f->id == HTTP_F_CONTENT_LENGTH)))
            continue;
        switch (f->id) {
        case HTTP_F_CONTENT_LENGTH:
            err |= buf_put_resp_length(o, resp, f);
            continue;
        case HTTP_F_DATE:
            has_date = 1;
            break;
        case HTTP_F_LOCATION:
        case HTTP_F_CONTENT_LOCATION:
            if (conf_remap_reverse(&wk->conf->remap, v, f->value_len, mapped, sizeof(mapped))) {
                err |= buf_append(o, resp->base + f->name, f->name_len);
                err |= buf_lit(o, ": ");
                err |= buf_puts(o, mapped);
                err |= buf_lit(o, "\r\n");
                continue;
            }
            break;
        case HTTP_F_OTHER:
            if (!rec->purge_forward_tags
                && ((f->name_len == 13 && http_field_is(resp, i, "surrogate-key"))
                    || (f->name_len == 9 && http_field_is(resp, i, "cache-tag"))))
                continue;   /* purge tags: ours (stored, purged by), not the client's */
            if (f->name_len == 6 && http_field_is(resp, i, "server")) {
                has_server = 1;     /* response_server_enabled 1: ours instead */
                if (rec->server_enabled == 1 && wk->server_hdr_len)
                    continue;
            }
            break;
        default:
            break;
        }
        err |= buf_put_field(o, resp, f);
    }
    if (resp->chunked && !up->up_decode && !resp->skip_body)
        err |= buf_lit(o, "Transfer-Encoding: chunked\r\n");
    if (!has_date) {
        err |= buf_lit(o, "Date: ");
        err |= buf_puts(o, resp_date());
        err |= buf_lit(o, "\r\n");
    }
    if (up->up_cstatus) {
        err |= buf_lit(o, "Cache-Status: cistern; fwd=");
        err |= buf_puts(o, up->up_cstatus);
        err |= buf_lit(o, "; fwd-status=");
        err |= buf_putu(o, (unsigned)resp->status);
        if (up->up_fill)
            err |= buf_lit(o, "; stored");
        const char *pn = parent_name(up);
        if (pn) {
            /* detail="parent=host:port" (with the reason not stored) */
            err |= buf_lit(o, "; detail=\"");
            if (!up->up_fill && up->up_cdetail) {
                err |= buf_puts(o, up->up_cdetail);
                err |= buf_lit(o, " ");
            }
            err |= buf_lit(o, "parent=");
            err |= buf_puts(o, pn);
            err |= buf_lit(o, "\"");
        } else if (!up->up_fill && up->up_cdetail) {
            err |= buf_lit(o, "; detail=");
            err |= buf_puts(o, up->up_cdetail);
        }
        err |= buf_lit(o, "\r\n");
    }
    err |= buf_puts(o, wk->debug_hdr);
    if (rec->via_resp_level > 0) {
        char via[VIA_MAX], codes[VIA_CODES + 1];
        via_codes_init(codes, &rq->r);
        via_codes_lookup(codes, up->up_cstatus, up->up_reval);
        codes[VIA_C_SERVER] = codes[VIA_C_PROXY] = resp->status == 304 ? 'N' : 'S';
        codes[VIA_C_FILL] = up->up_fill ? 'W' : ' ';
        codes[VIA_C_CONNECT] = 'S';
        err |= buf_append(o, via, via_format(via, 1, up->up_https, 1, codes));
    }
    if (rec->server_enabled == 1 || !has_server)
        err |= buf_append(o, wk->server_hdr, wk->server_hdr_len);
    err |= buf_puts(o, resp_connection_hdr(up->up_client_minor, ka));
    err |= buf_lit(o, "\r\n");
    if (!err && rq->rq_plugged)
        err |= plug_send_response(rq, o, mark, st, NULL) < 0;
    if (err) {
        o->end = mark;  /* (the pump runs on an empty output: nothing moved) */
        return -1;
    }
    if (!ka)
        up->up_client_ka = 0;
    resp_count(rq, st);
    alog_bytes(rq, o->end - mark);
    alog_head(rq, o->data + mark, o->end - mark);
    alog_origin(rq, up);
    alog_result(rq, up->up_reval ? "TCP_REFRESH_MISS" : "TCP_MISS", st);
    return 0;
}

/* A claim lasts transaction_no_activity_timeout_out + 5 s (req.c): a fill
 * still receiving its answer renews it (at most once a second), else a
 * long one loses it and the next request fetches the object again. */
static void
proxy_claim_renew(struct upstream *up)
{
    int64_t now = proxy_now_ms();

    if (!up->up_claim || now < up->up_claim_renew)
        return;
    filltab_renew(wk->shm->filltab, up->up_hash, (int)wk->slotno,
                  now + (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000);
    up->up_claim_renew = now + 1000;
}

/* De-chunked body bytes for an HTTP/1.0 client (room was checked). */
static void
proxy_sink_client(void *arg, const char *p, size_t n)
{
    struct req *rq = arg;

    buf_append(rq->rq_out, p, n);
    alog_bytes(rq, n);
    alog_obody(rq, n);
    rq->rq_up->up_fill_got += n;
    store_fill_data(&rq->rq_up->up_fill, p, n);
    proxy_claim_renew(rq->rq_up);
    proxy_rww_grew(rq->rq_up);
}

/* Decoded body bytes for the cache (the client gets them raw). */
static void
proxy_sink_fill(void *arg, const char *p, size_t n)
{
    struct upstream *up = arg;

    up->up_fill_got += n;
    store_fill_data(&up->up_fill, p, n);
    proxy_claim_renew(up);
    proxy_rww_grew(up);
}

int
proxy_client_body(struct req *rq)
{
    struct upstream *up = rq->rq_up;
    struct http_req *r = &rq->r;
    struct buf *in = rq->rq_in, *o = &up->up_out;
    size_t avail = in->end - in->start, room, used;
    int rc, drop;

    if (o->data == NULL && buf_alloc(o) < 0)
        return 503;
    room = o->size - o->end;
    if (room == 0)
        return HTTP_AGAIN;      /* the origin has not taken the last part */
    rc = http_body_forward(r, in->data + in->start, avail < room ? avail : room,
                           &used, &drop, NULL, NULL);
    /* Forward the bytes exactly as framed by the client (validated), but
     * a trailer line not to be forwarded. */
    if (!drop) {
        memcpy(o->data + o->end, in->data + in->start, used);
        o->end += used;
        alog_oreq(rq, 0, used);
    }
    in->start += used;
    wk->ctr->bytes_in += used;
    if (rc == HTTP_OK)
        rq->rq_body_owned = 0;
    if (up->up_state >= UP_SENDING && up->up_fd >= 0
        && !event_pending(&up->up_wev, EV_WRITE, NULL))
        up_send(up);
    return rc;
}

/* The request as we forwarded it (for Vary: the field values the origin
 * saw), parsed from up_out, which is kept until the response head. */
static const struct http_req *
proxy_forwarded_req(struct upstream *up)
{
    static struct http_req fr;
    /* the head we built may exceed the client's limits (our fields, a
     * longer remapped path): it is bounded by its buffer instead */
    struct http_limits lim = { up->up_out.end, up->up_out.end };

    http_req_reset(&fr);
    if (up->up_out.end == 0
        || http_head_scan(&fr, up->up_out.data, up->up_out.end, &lim) != HTTP_OK)
        return NULL;
    fr.base = up->up_out.data + fr.start;
    return &fr;
}

/* Does the origin's answer refresh the object we hold: a 304 to our
 * validators, or a 200 to a HEAD that matches it (RFC 9111 4.3.5; one
 * that does not has the object removed, store_head_fits)? */
static int
proxy_refreshes(struct req *rq, const struct upstream *up, const struct http_req *resp)
{
    if (up->up_reval && resp->status == 304)
        return 1;
    return up->up_method == HTTP_HEAD && resp->status == 200 && rq->obj_held
           && store_head_fits(rq, resp);
}

/* The origin answered 304 to our validators, or a 200 to a HEAD that
 * matches the object we hold (store_head_fits): refresh the stored
 * headers and answer the client from that object. */
static enum wk_rc
proxy_revalidated(struct req *rq, struct upstream *up, struct http_req *resp)
{
    static char merged[32768];
    char cs[128];
    struct store_cond cond = up->up_cond;
    struct buf *in = &up->up_in;
    int ka = up->up_client_ka && !worker_closing();
    size_t len = store_refresh(rq, resp, up->up_req_time, up->up_purge_gen, merged,
                               sizeof(merged));
    int st = resp->status;

    snprintf(cs, sizeof(cs), "cistern; fwd=%s; fwd-status=%d%s",
             up->up_cstatus ? up->up_cstatus : "stale", st, len ? "" : "; detail=not-refreshed");
    in->start += resp->start + resp->head_len;
    if (resp->keep_alive && up->up_req_done && !up->up_eof && !up->up_body_moot
        && in->start == in->end)
        origin_put(up);
    up_free(rq);
    alog_result(rq, "TCP_REFRESH_HIT", st);
    return proxy_answer_held(rq, &cond, ka, cs, len ? merged : NULL, len);
}

/* The transaction is over (up freed): answer from the object we hold. */
static enum wk_rc
proxy_answer_held(struct req *rq, const struct store_cond *cond, int ka,
                  const char *cs, const char *hdr, size_t hdrlen)
{
    if (store_send(rq, cond, ka, cs, hdr, hdrlen) < 0) {
        store_release(rq);
        resp_simple(rq, 502, "Connection: close\r\n", NULL, "cannot build the answer", 0);
        ka = 0;
    }
    if (!ka)
        rq->rq_close = 1;
    rq->rq_body_owned = 0;
    return WK_DONE;
}

/* The origin failed (status, or 0: no answer) and the held stale object
 * may stand in for it (stale-if-error). */
static enum wk_rc
proxy_serve_stale(struct req *rq, struct upstream *up, int status)
{
    struct store_cond cond = up->up_cond;
    int ka = up->up_client_ka && !worker_closing() && !(up->up_req_body && !up->up_req_done);
    char cs[128];

    if (status)
        snprintf(cs, sizeof(cs), "cistern; hit; fwd=stale; fwd-status=%d; detail=stale-if-error", status);
    else
        snprintf(cs, sizeof(cs), "cistern; hit; fwd=stale; detail=stale-if-error");
    up_free(rq);     /* the origin's answer is not wanted: close it */
    alog_result(rq, "TCP_REFRESH_FAIL_HIT", status);
    return proxy_answer_held(rq, &cond, ka, cs, NULL, 0);
}

/* The origin switched protocols as the client asked (101 to a forwarded
 * Upgrade): the 101 head goes to the client, and both connections become
 * a tunnel (tunnel.c) that the owner takes over: never cached, the
 * origin connection never pooled. */
static enum wk_rc
proxy_upgraded(struct req *rq, struct upstream *up, struct http_req *resp)
{
    struct buf *o = rq->rq_out;
    size_t mark;
    int err;

    if (buf_alloc(o) < 0) {
        up_fail(up, 502, "out of memory");
        return WK_MORE;
    }
    mark = o->end;
    err = buf_put_status(o, resp);
    for (int i = 0; i < resp->nfields; i++)
        if (!http_field_hop(resp, i) || resp->fields[i].id == HTTP_F_UPGRADE)
            err |= buf_put_field(o, resp, &resp->fields[i]);
    err |= buf_lit(o, "Connection: upgrade\r\n");
    if (wk->conf->rec.via_resp_level > 0) {     /* as on any response */
        char via[VIA_MAX], codes[VIA_CODES + 1];
        via_codes_init(codes, &rq->r);
        codes[VIA_C_SERVER] = codes[VIA_C_PROXY] = codes[VIA_C_CONNECT] = 'S';
        err |= buf_append(o, via, via_format(via, 1, 0, 1, codes));
    }
    err |= buf_lit(o, "\r\n");
    up->up_in.start += resp->start + resp->head_len;
    if (err || tunnel_from_origin(rq, up) < 0) {
        o->end = mark;
        up_fail(up, 502, err ? "response head too large" : "out of memory");
        return WK_MORE;
    }
    resp_count(rq, 101);
    alog_bytes(rq, o->end - mark);
    alog_head(rq, o->data + mark, o->end - mark);
    alog_origin(rq, up);
    alog_result(rq, "TCP_MISS", 101);
    up_free(rq);
    return WK_MORE;     /* the owner sees rq_tunnel and hands over */
}

/* Called by conn.c when c's output is empty: move the response along. */
/* An interim (1xx) response: on to HTTP/1.1 clients (RFC 9110 15.2: a
 * proxy forwards 1xx it did not ask for); 1.0 clients cannot take them.
 * A 101 switches protocols: a tunnel when the client asked for it (and
 * we forwarded the Upgrade), else refused. */
static enum wk_rc
proxy_interim(struct req *rq, struct upstream *up, struct http_req *resp)
{
    struct buf *in = &up->up_in;

    if (resp->status == 101) {
        if (!up->up_upgrade || up->up_tls != NULL)
            up_fail(up, 502, "101 Switching Protocols to a request that asked for no upgrade");
        else if (!tunnel_upgrade_agreed(rq, resp))
            up_fail(up, 502, "101 Switching Protocols to a protocol the client did not ask for");
        else
            return proxy_upgraded(rq, up, resp);
        return WK_MORE;
    }
    if (up->up_client_minor >= 1 && buf_alloc(rq->rq_out) == 0) {
        struct buf *o = rq->rq_out;
        size_t mark = o->end;
        int err = buf_put_status(o, resp);
        for (int i = 0; i < resp->nfields; i++)
            if (!http_field_hop(resp, i))
                err |= buf_put_field(o, resp, &resp->fields[i]);
        err |= buf_lit(o, "\r\n");
        if (err)
            o->end = mark;  /* no room: the client does without it */
        else
            resp_count_interim(rq);
    }
    in->start += resp->start + resp->head_len;
    http_req_reset(resp);
    return WK_MORE;
}

/* ------------------------------------------------------------------ */
/* Read-while-writer (issue 21; DESIGN.md): the fill of a claimed miss
 * with a Content-Length is published in the fill table; joiners in any
 * worker send from the ring, woken about every RWW_STEP bytes. */

static void
proxy_wake_slots(const uint64_t wake[4])
{
    uint64_t one = 1;

    for (unsigned s = 0; s < wk->nslots && s < FILLTAB_MAX_SLOTS; s++)
        if ((wake[s / 64] >> (s % 64)) & 1)
            if (write(wk->wake_fds[s], &one, sizeof(one)) < 0) { /* already pending */ }
}

int64_t
proxy_now_ms(void)
{
    struct timeval now;

    event_base_gettimeofday_cached(wk->base, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000;
}

/* Where the fill's bytes are now and what it stores, in v (0, or -1
 * when it has more extents than a slot holds). */
static int
proxy_rww_where(struct upstream *up, struct filltab_rww *v)
{
    uint32_t n = cache_fill_where(up->up_fill, &v->hdr_off, &v->hdr_len, v->ext_off,
                                  v->ext_pos, FILLTAB_RWW_EXT);
    const struct cache_meta *m = cache_fill_meta(up->up_fill);

    if (n == 0 || n > FILLTAB_RWW_EXT)
        return -1;
    v->next = n;
    v->avail = cache_fill_written(up->up_fill);
    v->stored = m->stored;      /* (less the origin's Age: the joiner's Age) */
    v->purge_gen = up->up_purge_gen;
    v->expires = m->expires;
    v->status = m->status;
    v->flags = m->flags;
    return 0;
}

static int
proxy_rww_open(struct upstream *up, const struct http_req *resp)
{
    struct filltab_rww v;
    uint64_t wake[4];
    int idx;

    /* A Vary response is stored under its variant's key, but published
     * under the URL's: a joiner of another variant would get this one.
     * A fill needing more extents than a slot lists would cut its joiners
     * when it outgrew the slot. */
    if (!wk->conf->rec.rww_enable || up->up_fill == NULL || resp->content_length <= 0
        || http_field_find_id(resp, HTTP_F_VARY, 0) >= 0
        || cache_fill_max_extents(wk->cache, (uint64_t)resp->content_length) > FILLTAB_RWW_EXT)
        return 0;
    memset(&v, 0, sizeof(v));
    v.total = (uint64_t)resp->content_length;
    if (proxy_rww_where(up, &v) < 0)
        return 0;
    idx = filltab_rww_open(wk->shm->filltab, up->up_hash, (int)wk->slotno, proxy_now_ms(), &v);
    if (idx < 0)
        return 0;
    up->up_rww = idx + 1;
    up->up_rww_next = RWW_STEP;
    /* the requests that came before this head join now (req_wait_check) */
    filltab_waiters(wk->shm->filltab, up->up_hash, proxy_now_ms(), wake);
    proxy_wake_slots(wake);
    return 1;
}

/* The fill grew: publish and wake the joiners every RWW_STEP bytes (and
 * whenever up_rww_next was set to 0). */
static void
proxy_rww_grew(struct upstream *up)
{
    struct filltab_rww v;
    uint64_t wake[4];

    if (!up->up_rww)
        return;
    if (up->up_fill == NULL) {
        proxy_rww_end(up, RWW_FAILED);      /* the store refused the rest */
        return;
    }
    if (cache_fill_written(up->up_fill) < up->up_rww_next)
        return;
    memset(&v, 0, sizeof(v));
    if (proxy_rww_where(up, &v) < 0) {
        proxy_rww_end(up, RWW_FAILED);
        return;
    }
    v.state = RWW_OPEN;
    v.total = (uint64_t)up->up_resp->content_length;
    filltab_rww_update(wk->shm->filltab, up->up_rww - 1, &v, proxy_now_ms(), wake);
    proxy_wake_slots(wake);
    up->up_rww_next = v.avail + RWW_STEP;
    proxy_bg_orphan(up);
}

/* The fill ended: joiners that have everything finish, the others are
 * cut short (RWW_FAILED). */
static void
proxy_rww_end(struct upstream *up, int state)
{
    struct filltab_rww v;
    uint64_t wake[4];
    int idx = up->up_rww - 1;

    if (!up->up_rww)
        return;
    up->up_rww = 0;
    if (filltab_rww_peek(wk->shm->filltab, idx, &v) < 0)
        return;
    v.state = state;
    filltab_rww_update(wk->shm->filltab, idx, &v, proxy_now_ms(), wake);
    proxy_wake_slots(wake);
}

/* What a final response does to the cache: an unsafe method's success
 * invalidates the URL; a storable answer to a fill starts one; the fill
 * claim ends now (hit-for-miss) when nothing will be stored, or when
 * the object is too large for waiters to wait for. */
static void
proxy_cache_response(struct upstream *up, const struct http_req *resp)
{
    if (wk->cache && up->up_keylen && resp->status >= 200 && resp->status < 400
        && up->up_method != HTTP_GET && up->up_method != HTTP_HEAD
        && up->up_method != HTTP_OPTIONS && up->up_method != HTTP_TRACE)
        store_invalidate(up->up_key, up->up_keylen, resp);
    if (up->up_store && wk->cache) {
        /* Only Vary looks at the forwarded request.  When it cannot be
         * read back (more fields than a head may hold once ours were
         * added), the variant is unknown: not stored, never stored as the
         * variant of a request without those fields. */
        const struct http_req *fwd = NULL;
        size_t kl = up->up_keylen - (up->up_part ? STORE_PART_SUFFIX_LEN : 0);
        if (up->up_part && resp->status == 206)
            up->up_cdetail = store_fill_begin_part(up->up_key, up->up_keylen, resp,
                                                   up->up_req_auth, up->up_req_time,
                                                   &up->up_req->rq_pol, &up->up_fill,
                                                   &up->up_old);
        else if (up->up_part && resp->status != 200)
            up->up_cdetail = "range-status";    /* never under the object's key */
        else if (http_field_find_id(resp, HTTP_F_VARY, 0) >= 0
            && (fwd = proxy_forwarded_req(up)) == NULL)
            up->up_cdetail = "vary-key";
        else
            up->up_cdetail = store_fill_begin(up->up_key, kl, resp, fwd, &up->up_req->r,
                                              up->up_req_auth, up->up_req_time,
                                              &up->up_req->rq_pol, &up->up_fill);
        if (up->up_fill)
            cache_fill_since(up->up_fill, up->up_purge_gen);
    }
    if (up->up_claim) {
        if (up->up_fill == NULL)
            proxy_release_claim(up, up->up_cdetail && strcmp(up->up_cdetail, "store-busy")
                                    ? PASS_MS : 0);
        else if (resp->content_length > COLLAPSE_LARGE
                 && !(up->up_part && up->up_req->rq_bg)
                 && (up->up_part || !proxy_rww_open(up, resp)))
            /* (a slice's client waits for all of it; a Range miss is not
             * published for read-while-writer: its fill may be a part) */
            proxy_release_claim(up, 0);
    }
}

/* The final answer's head came.  One that came before all of the
 * request was sent did not wait for (all of) it, and whether the origin
 * will read the rest is unknown: RFC 9112 9.3 has it close, and one that
 * does not would read the rest of the body as its next request.  Its
 * connection is not pooled. */
static void
up_answered(struct upstream *up)
{
    if (!up->up_req_done)
        up->up_body_moot = 1;
}

enum wk_rc
proxy_pump(struct req *rq)
{
    struct upstream *up = rq->rq_up;
    struct buf *in = &up->up_in;
    struct http_req *resp;
    int rc;

    if (up->up_state < UP_SENDING)
        return WK_WAIT;
    if (up->up_state != UP_BODY) {
        size_t avail = in->end - in->start;

        if (avail == 0) {
            if (up->up_eof) {
                up_fail(up, 502, "closed the connection without a response");
                /* on to the next parent: a new attempt (up_eof cleared),
                 * connecting or, on a pooled connection, sent already */
                if (rq->rq_up && up->up_state != UP_BODY && !up->up_eof)
                    return WK_WAIT;
                return rq->rq_up ? WK_ABORT : WK_MORE;
            }
            return WK_WAIT;
        }
        if (up->up_resp == NULL) {
            if ((up->up_resp = pool_get(&wk->head_pool)) == NULL) {
                up_fail(up, 502, "out of memory");
                return WK_MORE;
            }
            http_req_reset(up->up_resp);
        }
        resp = up->up_resp;
        rc = http_head_scan(resp, in->data + in->start, avail, &wk->resp_limits);
        if (rc == HTTP_AGAIN) {
            if (up->up_eof) {
                up_fail(up, 502, "closed the connection mid-head");
                return WK_MORE;
            }
            return WK_WAIT;
        }
        if (rc == HTTP_OK)
            rc = http_resp_parse(resp, in->data + in->start + resp->start, up->up_method);
        if (rc != HTTP_OK) {
            up_fail(up, 502, resp->reason ? resp->reason : "invalid response");
            return WK_MORE;
        }
        if (resp->status < 200)
            return proxy_interim(rq, up, resp);
        if (up->up_prule) {
            int again = up->up_safe ? parent_status_retry(up, resp->status) : 0;
            if (again) {
                log_notice("conn %llu: parent %s:%d answered %d; retrying elsewhere",
                           (unsigned long long)rq->rq_id, up->up_host, up->up_port,
                           resp->status);
                if (proxy_parent_again(up, (enum parent_why)again))
                    return WK_WAIT;
            }
            parent_answered(up);
        }
        if (rq->rq_plugged) {
            /* the plugins' read_response: fields, storing, TTL */
            if (plug_read_response(rq, up) < 0) {
                up_fail(up, 502, "a plugin's response head does not fit");
                return WK_MORE;
            }
            resp = up->up_resp;
        }
        up_answered(up);
        /* The origin's verdict on the stale object we hold (kept even
         * without validators, for stale-if-error). */
        if (proxy_refreshes(rq, up, resp))
            return proxy_revalidated(rq, up, resp);
        if (resp->status >= 500 && store_stale_on_error(rq))
            return proxy_serve_stale(rq, up, resp->status);
        if (rq->rq_slicer && resp->status != 206) {
            /* a slice's block (worker/slice.c) is a 206 or nothing: a 200
             * would fetch the whole object for a seek */
            up_fail(up, 502, "a slice's block answered without its range");
            return WK_MORE;
        }
        if (up->up_cpl_on && resp->status == 206 && !store_cpl_joins(rq, &up->up_cpl, resp)) {
            if (proxy_cpl_refetch(up))
                return WK_WAIT;
            up_fail(up, 502, "request too large to send again");
            return WK_MORE;
        }
        up->up_cpl_join = up->up_cpl_on && resp->status == 206;
        if (!up->up_cpl_join)
            store_release(rq);   /* whatever we held, this answer replaces it */
        proxy_cache_response(up, resp);
        /* the request is answered: no retry will need its bytes */
        up->up_out.start = up->up_out.end = 0;
        if (proxy_client_head(rq, up, resp) < 0) {
            up_fail(up, 502, "response head too large");
            return WK_MORE;
        }
        in->start += resp->start + resp->head_len;
        up->up_parsed = in->start;
        up->up_state = UP_BODY;
        up->up_unsent = -1;     /* the request is taken: a timer now is
                                   the response's (up_still_taking) */
        if (!resp->has_body)
            resp->body_done = 1;
        /* a completed tail: the part's bytes go first, the origin is not
         * read (nor timed) meanwhile: a slow client takes its time */
        if (up->up_cpl_join && !up->up_cpl.after) {
            event_del(&up->up_rev);
            return proxy_cpl_lend(rq, up, up->up_cpl.pos, up->up_cpl.end) < 0 ? WK_ABORT
                                                                                : WK_MORE;
        }
        /* Body bytes that came with the head go out with it, in one
         * write.  The head goes out even when the body has to wait, or
         * turns out broken: the client then sees the head and the cut, as
         * when the error comes with a later read (the next call answers
         * ABORT again: see proxy_pump_body). */
        enum wk_rc next = proxy_pump_body(rq, up);
        return next == WK_WAIT || next == WK_ABORT ? WK_MORE : next;
    }
    return proxy_pump_body(rq, up);
}

/* Read the origin again, timed (a pending event keeps its timer; a
 * stopped one gets it back). */
static void
up_read_again(struct upstream *up)
{
    struct timeval tv;

    if (up->up_eof)
        return;
    if (!event_pending(&up->up_rev, EV_READ, NULL)) {
        up_timer(up, &tv);
        event_add(&up->up_rev, &tv);
    }
    if (tls_origin_pending(up))
        event_active(&up->up_rev, EV_READ, 1);
}

/* proxy_pump() once the head is parsed: the body, then the end. */
static enum wk_rc
proxy_pump_body(struct req *rq, struct upstream *up)
{
    struct buf *in = &up->up_in;
    struct http_req *resp = up->up_resp;
    int rc;

    /* A framing error was found already (http_req_body() set the reason
     * and left its decoder mid-way: never feed it again). */
    if (resp->reason)
        return WK_ABORT;
    if (up->up_lent) {
        /* the part's bytes before the origin's: the rest of them first */
        if (rq->rq_hit_pos < rq->rq_hit_end)
            return store_body_more(rq) ? WK_MORE : WK_ABORT;
        up->up_lent = 0;
        up_read_again(up);
    }
    if (in->start == up->up_parsed && in->start == in->end) {
        in->start = in->end = up->up_parsed = 0;
        up_read_again(up);  /* the client took everything: the origin's turn */
    }
    if (!resp->body_done && up->up_parsed < in->end) {
        size_t used;
        if (up->up_decode) {
            struct buf *o = rq->rq_out;
            /* de-chunk into the client's buffer, bounded by its room */
            if (buf_alloc(o) < 0)
                return WK_ABORT;
            size_t room = o->size - o->end, feed = in->end - up->up_parsed;
            if (feed > room)
                feed = room;
            rc = http_req_body(resp, in->data + up->up_parsed, feed, &used,
                               proxy_sink_client, rq);
            up->up_parsed += used;
            in->start = up->up_parsed;
        } else {
            int drop;
            rc = http_body_forward(resp, in->data + up->up_parsed,
                                   in->end - up->up_parsed, &used, &drop,
                                   up->up_fill ? proxy_sink_fill : NULL, up);
            alog_obody(rq, used);
            if (drop) {
                in->start = up->up_parsed + used;   /* a trailer line: not lent */
            } else {
                rq->rq_body = in->data + up->up_parsed;
                rq->rq_body_len = used;
                alog_bytes(rq, used);
            }
            up->up_parsed += used;
        }
        if (rc != HTTP_OK && rc != HTTP_AGAIN) {
            log_warn("conn %llu: origin %s:%d: bad response body framing",
                     (unsigned long long)rq->rq_id, up->up_host, up->up_port);
            wk->ctr->origin_errors++;
            metrics_ohost_count(up, SHM_OH_ERR);
            return WK_ABORT;
        }
        if (up->up_orphan) {
            log_info("conn %llu: background fill dropped: its joiners left before "
                     "background_fill_completed_threshold", (unsigned long long)rq->rq_id);
            return WK_ABORT;
        }
        if (used > 0)
            return WK_MORE;
        /* a trailer name held back until whole (http_body_forward): the
         * origin's read may have stopped at a full buffer */
        up_read_again(up);
    }
    if (!resp->body_done && up->up_eof) {
        if (http_body_eof(resp) != HTTP_OK) {
            log_warn("conn %llu: origin %s:%d closed mid-body; cutting the client",
                     (unsigned long long)rq->rq_id, up->up_host, up->up_port);
            wk->ctr->origin_errors++;
            metrics_ohost_count(up, SHM_OH_ERR);
            return WK_ABORT;
        }
    }
    if (!resp->body_done)
        return WK_WAIT;

    /* Complete: pool the connection if the exchange ended cleanly. */
    int reuse = resp->keep_alive && up->up_req_done && !up->up_eof && !up->up_body_moot
                && up->up_parsed == in->end;
    int client_ka = up->up_client_ka && !resp->until_close && !up->up_decode
                    && !worker_closing();
    if (up->up_fill) {
        int frc, whole;

        up->up_rww_next = 0;
        proxy_rww_grew(up);     /* joiners see every byte before the end */
        whole = up->up_rww
                && cache_fill_written(up->up_fill) == (uint64_t)resp->content_length;
        frc = store_fill_end_part(&up->up_fill, &up->up_old, 1);
        /* A fill that is not stored (the ring lapped it, the index said
         * no) still has every body byte in extents its joiners pinned:
         * they finish; only a body short of its length fails them. */
        proxy_rww_end(up, frc == CACHE_OK || whole ? RWW_DONE : RWW_FAILED);
        if (frc != CACHE_OK)
            log_debug("conn %llu: %.*s not stored: %s", (unsigned long long)rq->rq_id,
                      (int)up->up_keylen, up->up_key, cache_strerror(frc));
    }
    proxy_release_claim(up, 0);     /* the object is visible: wake waiters */
    if (reuse)
        origin_put(up);
    if (!up->up_req_done)
        client_ka = 0;  /* the rest of the request body is unread */
    struct store_cpl cp = up->up_cpl;
    int after = up->up_cpl_join && cp.after;
    up_free(rq);
    if (!client_ka)
        rq->rq_close = 1;
    rq->rq_body_owned = 0;
    /* a completed head: the part's bytes follow, lent as a hit's are */
    if (after && proxy_cpl_lend(rq, NULL, cp.pos, cp.end) < 0)
        return WK_ABORT;
    return WK_DONE;
}

void
fill_release(const uint8_t h[16], int64_t pass_ms)
{
    struct timeval now;
    uint64_t wake[4], one = 1;

    event_base_gettimeofday_cached(wk->base, &now);
    filltab_release(wk->shm->filltab, h, (int)wk->slotno,
                    (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000, pass_ms, wake);
    for (unsigned s = 0; s < wk->nslots && s < FILLTAB_MAX_SLOTS; s++)
        if ((wake[s / 64] >> (s % 64)) & 1)
            if (write(wk->wake_fds[s], &one, sizeof(one)) < 0) { /* already pending */ }
}

void
proxy_release_claim(struct upstream *up, int64_t pass_ms)
{
    if (!up->up_claim)
        return;
    up->up_claim = 0;
    fill_release(up->up_hash, pass_ms);
}

void
proxy_client_sent(struct req *rq, size_t n)
{
    struct upstream *up = rq->rq_up;

    if (!up->up_lent)
        up->up_in.start += n;
}

/* Has enough of the fill come for it to go on without a client
 * (background_fill_completed_threshold of its Content-Length; a
 * threshold of 0: always, a length or not)? */
static int
proxy_bg_enough(const struct upstream *up)
{
    int64_t cl = up->up_resp ? up->up_resp->content_length : -1;
    int milli = wk->conf->rec.bg_fill_milli;

    if (milli > 1000)
        return 0;
    if (cl > 0)
        return up->up_fill_got * 1000 >= (uint64_t)cl * (uint64_t)milli;
    return milli == 0;
}

/* ATS's background fill: a fill whose client leaves goes on if enough of
 * it came, or while joiners follow it (then up_bg_rww: it stops when the
 * last one leaves before enough came, proxy_bg_orphan). */
int
proxy_bg_fill(struct req *rq)
{
    struct upstream *up = rq->rq_up;

    if (up == NULL || up->up_fill == NULL || up->up_state != UP_BODY || rq->rq_abort)
        return 0;
    if (proxy_bg_enough(up))
        return 1;
    /* Others follow this fill (read-while-writer): it goes on for them. */
    up->up_bg_rww = up->up_rww && filltab_rww_joined(wk->shm->filltab, up->up_rww - 1);
    return up->up_bg_rww;
}

/* A background fill kept for its joiners, all gone before enough came?
 * (Asked as the fill grows, every RWW_STEP bytes.) */
static void
proxy_bg_orphan(struct upstream *up)
{
    if (up->up_bg_rww && !proxy_bg_enough(up)
        && !(up->up_rww && filltab_rww_joined(wk->shm->filltab, up->up_rww - 1)))
        up->up_orphan = 1;
}

void
proxy_abort(struct req *rq)
{
    if (rq == NULL)
        return;
    up_free(rq);
}
