/*
 * worker/rww.c: read-while-writer, the joiner's side (issue 21; the
 * filler's side is in proxy.c, the shared state in shm/filltab.h).
 *
 * A GET that finds its miss being filled by any worker (FT_WAIT), where
 * the filler published the fill (a Content-Length over COLLAPSE_LARGE),
 * joins it (a GET that came before the origin's head waits as a collapsed
 * miss until the filler publishes, which wakes it to join): it copies the
 * published state (header block and extents in
 * the ring, bytes written), pins the extents' segments, answers with the
 * origin's header block and Content-Length, and sends the body straight
 * from the mapping, span by span, up to the bytes written.  When it has
 * sent those it waits: the filler wakes the joiners' workers (their
 * eventfds) about every 64 KiB and at the end; req_wait_check() then runs
 * rww_wake() for every joiner on this worker, which takes a fresh copy and
 * lends the next span.  Each joiner goes at its own pace (its pins keep
 * the extents; the filler never waits for it).  A fill that fails cuts the
 * joiners that have not sent everything short with a reset, so a truncated
 * body never looks complete.  Requests with Range or a condition are not
 * joined: they fetch for themselves at once (rww_join says -2), as the
 * waiters of a large answer did before, instead of waiting for the whole
 * fill; so are those after a purge that began once the fill had asked
 * the origin, and (req.c, once joined) those a lookup would not give the
 * stored object without asking the origin (a Cookie under
 * cache_responses_to_cookies, a response or request no-cache, a zero
 * lifetime: store_joinable, on the meta the slot carries).  A Vary response is not published
 * (proxy.c: it is stored under its variant's key).
 *
 * The owner does not matter: an HTTP/1.1 connection and an HTTP/2 stream
 * both send what rww_more lends and park while rww_waiting (conn_flush;
 * h2.c's pump, whose stream defers its DATA); rww_wake lends the next
 * span and calls the owner's flush, which for a stream only marks it, and
 * a failed fill sets rq_abort (the connection's reset, the stream's
 * RST_STREAM INTERNAL_ERROR).  However the request ends (its client
 * leaves, a stream reset, GOAWAY, the connection closing), its REQ_DONE
 * releases the join through store_release: pins, the joinq link, the
 * gauge rww_joiners.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "shm/filltab.h"
#include "worker/req.h"
#include "worker/worker.h"

struct rww_join {
    int                idx;         /* the fill table's slot */
    uint32_t           pinned;      /* extents pinned: v.ext_off[0..pinned) */
    struct req        *next;        /* the worker's joiners */
    struct filltab_rww v;           /* our copy of the published state */
};

/* Pin the extents that appeared since the last copy: -1 when one of them
 * left the ring already (treated as a failed fill). */
static int
rww_pin_new(struct rww_join *j)
{
    while (j->pinned < j->v.next) {
        if (cache_off_pin(wk->cache, j->v.ext_off[j->pinned]) < 0)
            return -1;
        j->pinned++;
    }
    return 0;
}

static void
rww_unlink(struct req *rq)
{
    for (struct req **pp = &wk->joinq; *pp; pp = &((struct rww_join *)(*pp)->rq_rww)->next)
        if (*pp == rq) {
            *pp = ((struct rww_join *)rq->rq_rww)->next;
            break;
        }
}

void
rww_release(struct req *rq)
{
    struct rww_join *j = rq->rq_rww;

    if (j == NULL)
        return;
    rww_unlink(rq);
    wk->ctr->rww_joiners--;
    filltab_rww_leave(wk->shm->filltab, j->idx, j->v.gen, (int)wk->slotno);
    for (uint32_t i = 0; i < j->pinned; i++)
        cache_off_unpin(wk->cache, j->v.ext_off[i]);
    free(j);
    rq->rq_rww = NULL;
    rq->rq_body = NULL;
    rq->rq_body_len = 0;
    rq->rq_hit_pos = rq->rq_hit_end = 0;
    memset(&rq->obj, 0, sizeof(rq->obj));      /* the stand-in (never held) */
}

int
rww_joinable(const struct req *rq)
{
    const struct http_req *r = &rq->r;

    return wk->conf->rec.rww_enable && wk->cache && r->method == HTTP_GET
           && !r->fidx[HTTP_F_RANGE] && !r->fidx[HTTP_F_IF_RANGE]
           && !r->fidx[HTTP_F_IF_NONE_MATCH] && !r->fidx[HTTP_F_IF_MODIFIED_SINCE];
}

int
rww_join(struct req *rq, const uint8_t h[16])
{
    struct rww_join *j;
    struct timeval now;
    struct cache_obj *o = &rq->obj;
    int stale;      /* it fetches for itself (-2) */

    if (!rww_joinable(rq))
        return wk->conf->rec.rww_enable && filltab_rww_published(wk->shm->filltab, h)
               ? -2 : -1;
    if ((j = calloc(1, sizeof(*j))) == NULL)
        return -1;
    event_base_gettimeofday_cached(wk->base, &now);
    j->idx = filltab_rww_join(wk->shm->filltab, h, (int)wk->slotno,
                              (int64_t)now.tv_sec * 1000 + now.tv_usec / 1000, &j->v);
    /* A fill that asked the origin before a purge began is stored stale
     * (cache/fill.c): a request after the purge fetches for itself. */
    stale = j->idx >= 0 && j->v.purge_gen != cache_purge_gen(wk->cache);
    if (j->idx < 0 || j->v.next == 0 || stale || rww_pin_new(j) < 0)
        goto fail;
    /* What store_send() reads of a held object: the header block (in
     * extent 0, pinned), the length, the stored time; never released as
     * one (obj_held stays 0). */
    memset(o, 0, sizeof(*o));
    o->iov[0].iov_base = (void *)cache_off_ptr(wk->cache, j->v.hdr_off);
    o->iov[0].iov_len = j->v.hdr_len;
    o->hdr_len = j->v.hdr_len;
    o->body_len = j->v.total;
    o->meta.stored = j->v.stored;
    o->meta.expires = j->v.expires;
    o->meta.status = j->v.status;
    o->meta.flags = j->v.flags;
    memcpy(o->key_hash, h, 16);
    rq->rq_rww = j;
    j->next = wk->joinq;
    wk->joinq = rq;
    wk->ctr->rww_joiners++;
    return 0;
fail:
    filltab_rww_leave(wk->shm->filltab, j->idx, j->v.gen, (int)wk->slotno);
    for (uint32_t i = 0; i < j->pinned; i++)
        cache_off_unpin(wk->cache, j->v.ext_off[i]);
    free(j);
    return stale ? -2 : -1;
}

/* Lend the next span of the body written so far (store_body_more's
 * joiner case): 1, or 0 when the joiner has caught up with the fill. */
int
rww_more(struct req *rq)
{
    struct rww_join *j = rq->rq_rww;
    uint64_t pos = rq->rq_hit_pos, lim;
    uint32_t i;

    if (pos >= rq->rq_hit_end || j->pinned == 0)
        return 0;
    for (i = 0; i + 1 < j->pinned && j->v.ext_pos[i + 1] <= pos; i++)
        ;
    lim = j->v.avail < rq->rq_hit_end ? j->v.avail : rq->rq_hit_end;
    if (i + 1 < j->pinned && j->v.ext_pos[i + 1] < lim)
        lim = j->v.ext_pos[i + 1];
    if (lim <= pos)
        return 0;
    rq->rq_body = (const char *)cache_off_ptr(wk->cache, j->v.ext_off[i] + (pos - j->v.ext_pos[i]));
    rq->rq_body_len = (size_t)(lim - pos);
    rq->rq_hit_pos = lim;
    return 1;
}

/* Is the joiner still waiting for bytes of the fill? */
int
rww_waiting(const struct req *rq)
{
    return rq->rq_rww != NULL && rq->rq_hit_pos < rq->rq_hit_end;
}

/* The filler woke us: take a fresh copy; lend more when the last span is
 * out; cut the answer short when the fill failed. */
static void
rww_wake(struct req *rq)
{
    struct rww_join *j = rq->rq_rww;
    uint32_t gen = j->v.gen;

    /* The last copy said DONE: every extent is pinned, the slot is no
     * longer ours to read (it may serve another fill by now). */
    if (j->v.state == RWW_DONE) {
        if (rq->rq_body_len == 0 && rww_more(rq))
            rq->rq_ops->flush(rq);
        return;
    }
    if (filltab_rww_get(wk->shm->filltab, j->idx, gen, &j->v) < 0
        || j->v.state == RWW_FAILED || rww_pin_new(j) < 0) {
        if (rq->rq_hit_pos < rq->rq_hit_end || rq->rq_body_len) {
            rq->rq_abort = 1;           /* never a complete-looking short body */
            rq->rq_body_len = 0;
            j->v.next = j->pinned;      /* (the copy may be another fill's) */
            rq->rq_hit_pos = rq->rq_hit_end;
            rq->rq_ops->flush(rq);
        }
        return;
    }
    if (rq->rq_body_len == 0 && rww_more(rq))
        rq->rq_ops->flush(rq);
}

void
rww_wake_all(struct worker *w)
{
    struct req *rq, *next;

    for (rq = w->joinq; rq; rq = next) {
        next = ((struct rww_join *)rq->rq_rww)->next;
        rww_wake(rq);   /* may end rq (its flush), never the next one */
    }
}
