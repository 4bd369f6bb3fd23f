/*
 * worker/slice.c: ATS slice semantics for ranges that span many blocks
 * (issue 21, proxy.config.cistern.slice.blockbytes S).
 *
 * A Range miss on a slicing rule is fetched as aligned blocks on internal
 * requests of their own (conn.c's conn_bg_slice, carrying the fill claim
 * on the part key), each stored as the object's part (blocks that adjoin
 * under one strong ETag combine, proxy.c and store.c).  A closed range of
 * at most SLICE_AT_ONCE blocks is fetched in one request and answered
 * from the part like a hit, as before.  An open range `bytes=a-`, or a
 * closed one over more blocks, is streamed:
 *
 *  - only the block holding a is fetched first (or none, when the stored
 *    part holds a); the answer is a 206 for [a, last] (last: the range's
 *    end or the complete length's, learned from that block), its bytes
 *    lent from the held part as a hit's are;
 *  - whenever a part is taken that ends before last, the block after it
 *    is asked for: one block ahead of the one being sent, never more, so
 *    a client that stops reading or leaves stops the origin within a
 *    block or two (nothing fills the rest in the background);
 *  - when the held part's bytes are out (req_sent_all -> slice_sent), the
 *    request waits like a read-while-writer joiner and this worker wakes
 *    itself; slice_wake_all (req_wait_check) looks the part up again
 *    (slice_more): a block stored already (by us or before) is taken
 *    without an origin request; while its fetch runs it waits on, woken
 *    by the claim's release (the fill table's wake-up).  The lending is
 *    never done from store.c or the owner's write loop, so store.c knows
 *    nothing of streams but store_send_span.
 *
 * Every part taken must have the first one's strong ETag and complete
 * length and hold the next byte.  When the block asked for does not come
 * that way (the origin failed or answered anything but a 206, proxy.c
 * stores nothing of it; another ETag or length, which replaced the part)
 * the answer is cut: rq_abort, the connection reset, never a complete-
 * looking short body.  Nothing mixed is stored: parts combine only under
 * one strong ETag and complete length (store.c).  A part of the stream's
 * ETag and length that holds neither the next byte nor the bytes held
 * before is another stream's run of blocks of the object (one part per
 * object): the block is asked for again, SLICE_AGAIN times at most.
 *
 * Ownership: a streaming request's state (struct slice_stream, with a
 * copy of its head to replay, since the connection may move its input
 * buffer) is allocated here, off the hit path, linked on wk->sliceq and
 * freed at DONE (slice_end).  The fetches it starts own their claims and
 * end by themselves.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm/filltab.h"
#include "shm/log.h"
#include "worker/req.h"
#include "worker/worker.h"

/* A closed range over at most this many blocks is fetched in one request
 * (the origin's round trip paid once); longer ones are streamed. */
#define SLICE_AT_ONCE 2
/* A strong ETag longer than this is not followed across blocks. */
#define SLICE_ETAG_MAX 256
/* A block fetched and then replaced by another stream's before we took
 * it is asked for again at most this many times. */
#define SLICE_AGAIN 4

struct slice_stream {
    struct req      *next;            /* the worker's streams (wk->sliceq) */
    uint64_t         bs;              /* the block size */
    uint64_t         last;            /* the answer's last byte */
    uint64_t         n;               /* the complete length */
    uint64_t         base, end;       /* the held part's first and last bytes */
    uint64_t         pos;             /* the next byte to lend (no part held) */
    uint64_t         asked;           /* the last block we asked for, + 1 */
    unsigned         fetching:1;      /* a fetch of the part key ran when
                                         last looked */
    unsigned         want:1;          /* the bytes lent are out: lend more
                                         at the next wake-up */
    unsigned         failed:1;        /* the next block did not come */
    unsigned         moved:1;         /* the part looked at was ours (its
                                         ETag and length) without st->pos,
                                         nor the bytes held before */
    unsigned         again:3;         /* asked again for this block */
    uint8_t          h[16];           /* the part key's hash */
    uint8_t          oh[16];          /* the object key's: the blocks
                                         may complete the object */
    size_t           elen, keylen, headlen;
    char             etag[SLICE_ETAG_MAX];
    char             key[STORE_KEY_MAX];
    char             head[];          /* the head to replay: without its
                                         Range line and its empty line */
};

/* rq's head without its Range line(s) and its ending empty line into out
 * (room for head_len bytes): its length. */
static size_t
slice_head(const struct http_req *r, char *out)
{
    const char *p = r->base, *end = r->base + r->head_len;
    size_t len = 0;

    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        size_t ll = eol ? (size_t)(eol + 1 - p) : (size_t)(end - p);
        int blank = ll == 1 || (ll == 2 && p[0] == '\r');
        if (!blank && !(ll > 6 && p[5] == ':' && strncasecmp(p, "range", 5) == 0)) {
            memcpy(out + len, p, ll);
            len += ll;
        }
        p += ll;
    }
    return len;
}

/* Ask for the block [a, a + bs - 1] on an internal request replaying
 * head with that Range, carrying the fill claim on h (the part key's),
 * and register as a waiter of that claim (its release wakes us).
 * 1: our fetch runs; 2: another's fetch of h runs; 0: none. */
static int
slice_fetch(struct req *rq, const uint8_t h[16], uint64_t a, uint64_t bs,
            const char *head, size_t headlen)
{
    int64_t now = proxy_now_ms();
    char rng[64];

    switch (filltab_claim(wk->shm->filltab, h, (int)wk->slotno, now,
                          (int64_t)wk->conf->rec.txn_no_activity_out * 1000 + 5000)) {
    case FT_CLAIMED:
        break;
    case FT_WAIT:
        return 2;
    default:
        return 0;
    }
    snprintf(rng, sizeof(rng), "bytes=%llu-%llu", (unsigned long long)a,
             (unsigned long long)(a + bs - 1));
    if (rq->rq_ops->slice(rq, head, headlen, h, rng) != 0) {
        fill_release(h, 0);
        return 0;
    }
    /* the claim is the fetch's now: wait on it as a waiter (else only
     * the worker's tick would tell us it ended) */
    if (filltab_claim(wk->shm->filltab, h, (int)wk->slotno, now, 1000) == FT_CLAIMED)
        fill_release(h, 0);     /* it ended already */
    return 1;
}

int
slice_start(struct req *rq, const uint8_t h[16], uint64_t a, uint64_t b)
{
    uint64_t s = (uint64_t)wk->conf->rec.slice_blockbytes, first = a / s * s;
    char *head = malloc(rq->r.head_len);
    int rc;

    if (head == NULL)
        return 0;
    if (b != UINT64_MAX && b / s - a / s < SLICE_AT_ONCE)
        rc = slice_fetch(rq, h, first, (b / s + 1) * s - first, head, slice_head(&rq->r, head));
    else
        rc = slice_fetch(rq, h, first, s, head, slice_head(&rq->r, head));
    free(head);
    if (rc == 1)
        rq->rq_sliced = 1;  /* (waiting for another's slice, it may fetch its own after) */
    return rc != 0;
}

/* Keep one block ahead: ask for the block holding `from` unless a fetch
 * runs or we asked for it already. */
static void
slice_ahead(struct req *rq, uint64_t from)
{
    struct slice_stream *st = rq->rq_slice;
    uint64_t blk = from / st->bs * st->bs;
    int rc;

    if (st->fetching || st->asked == blk + 1)
        return;
    rc = slice_fetch(rq, st->h, blk, st->bs, st->head, st->headlen);
    st->fetching = rc != 0;
    if (rc == 1)
        st->asked = blk + 1;
}

/* Is the held part (rq->obj) the stream's: its ETag and complete length,
 * holding st->pos?  Then it is set up to lend from st->pos. */
static int
slice_take(struct req *rq)
{
    struct slice_stream *st = rq->rq_slice;
    uint64_t pa, pb, n;
    const char *e;
    size_t el = 0;

    if (!store_part_ident(&rq->obj, &pa, &pb, &n, &e, &el) || e == NULL || n != st->n
        || el != st->elen || memcmp(e, st->etag, el) != 0)
        return 0;
    if (st->pos < pa || st->pos > pb) {
        /* another run of our blocks replaced the one we held (not the
         * same part still there: then our block did not come) */
        st->moved |= pa > st->base || pb < st->end;
        return 0;
    }
    st->base = pa;
    st->end = pb;
    rq->rq_hit_pos = st->pos - pa;
    rq->rq_hit_end = (pb < st->last ? pb : st->last) + 1 - pa;
    return 1;
}

/* Hold the stream's next bytes: the part, or the object once the blocks
 * completed it (then stored whole under its own key).  1 when taken. */
static int
slice_look(struct req *rq)
{
    struct slice_stream *st = rq->rq_slice;
    const char *why;
    char cs[112];

    if (store_lookup(rq, st->key, st->keylen, st->h, 0, &why, cs, sizeof(cs)) == STORE_HIT
        && slice_take(rq))
        return 1;
    store_release(rq);
    if (store_lookup(rq, st->key, st->keylen - STORE_PART_SUFFIX_LEN, st->oh, 0, &why, cs,
                     sizeof(cs)) == STORE_HIT && slice_take(rq))
        return 1;
    store_release(rq);
    return 0;
}

int
slice_begin(struct req *rq, const char *key, size_t keylen, const uint8_t h[16],
            uint64_t a, uint64_t b)
{
    struct slice_stream *st;
    uint64_t pa, pb, n;
    const char *e;
    size_t el = 0;

    if (!store_part_ident(&rq->obj, &pa, &pb, &n, &e, &el) || e == NULL || el > SLICE_ETAG_MAX
        || a < pa || a > pb || (b != UINT64_MAX && b <= pb) || pb + 1 >= n
        || (st = calloc(1, sizeof(*st) + rq->r.head_len)) == NULL)
        return 0;
    st->bs = (uint64_t)wk->conf->rec.slice_blockbytes;
    st->n = n;
    st->last = b < n - 1 ? b : n - 1;
    st->pos = a;
    memcpy(st->h, h, 16);
    memcpy(st->etag, e, el);
    st->elen = el;
    memcpy(st->key, key, keylen);
    st->keylen = keylen;
    cache_key_hash(wk->cache, key, keylen - STORE_PART_SUFFIX_LEN, st->oh);
    st->headlen = slice_head(&rq->r, st->head);
    rq->rq_slice = st;
    rq->rq_sliced = 1;
    st->next = wk->sliceq;
    wk->sliceq = rq;
    slice_take(rq);
    slice_ahead(rq, pb + 1);
    return 1;
}

int
slice_send(struct req *rq, const struct store_cond *sc, int keep_alive, const char *cstatus)
{
    const struct slice_stream *st = rq->rq_slice;
    struct store_span span = { st->pos, st->last, st->base, st->n };

    if (store_send_span(rq, sc, keep_alive, cstatus, &span) == 0)
        return 0;
    slice_end(rq);      /* (to the origin as sent: no stream) */
    return -1;
}

/* The next byte the stream lends. */
static uint64_t
slice_pos(const struct req *rq)
{
    const struct slice_stream *st = rq->rq_slice;

    return rq->obj_held ? st->base + rq->rq_hit_pos : st->pos;
}

int
slice_waiting(const struct req *rq)
{
    return !rq->rq_abort && slice_pos(rq) <= ((const struct slice_stream *)rq->rq_slice)->last;
}

/* This worker's next wake-up runs slice_wake_all. */
static void
slice_kick(void)
{
    uint64_t one = 1;

    if (write(wk->wake_fds[wk->slotno], &one, sizeof(one)) < 0) { /* already pending */ }
}

int
slice_sent(struct req *rq)
{
    struct slice_stream *st = rq->rq_slice;

    if (rq->rq_abort || slice_pos(rq) > st->last)
        return 0;
    /* (lent from the wake-up, not here: the owner's write loop that
     * called us ends once its lent bytes are out) */
    st->want = 1;
    slice_kick();
    return 1;
}

/* The held part's bytes are out: lend the next ones (1), or 0 while
 * their block is being fetched, or when it failed (st->failed). */
static int
slice_more(struct req *rq)
{
    struct slice_stream *st = rq->rq_slice;
    uint64_t blk;
    int rc;

    st->pos = slice_pos(rq);
    if (st->pos > st->last || rq->rq_abort)
        return 0;
    if (st->fetching) {
        if (filltab_busy(wk->shm->filltab, st->h, (int)wk->slotno, proxy_now_ms()))
            return 0;       /* woken by its release */
        st->fetching = 0;
    }
    store_release(rq);
    st->moved = 0;
    if (slice_look(rq)) {
        st->again = 0;
        if (st->end < st->last)
            slice_ahead(rq, st->end + 1);
        return store_body_more(rq);
    }
    blk = st->pos / st->bs * st->bs;
    if (st->asked == blk + 1 && st->moved && st->again < SLICE_AGAIN) {
        /* our block came, and another stream's of the same object
         * (the part holds one run of blocks) replaced it before we
         * took it: not a failure, ask again */
        st->asked = 0;
        st->again++;
    }
    if (st->asked != blk + 1) {
        /* not asked for yet (another's fetch ran, or ours could not
         * start): ask now */
        rc = slice_fetch(rq, st->h, blk, st->bs, st->head, st->headlen);
        st->fetching = rc != 0;
        if (rc == 1)
            st->asked = blk + 1;
        if (rc)
            return 0;
    }
    log_info("conn %llu: slice at %llu of %llu did not come as the first block did "
             "(origin error, status, ETag or length): answer cut",
             (unsigned long long)rq->rq_id, (unsigned long long)st->pos,
             (unsigned long long)st->n);
    st->failed = 1;
    return 0;
}

void
slice_end(struct req *rq)
{
    struct slice_stream *st = rq->rq_slice;

    if (st == NULL)
        return;
    for (struct req **pp = &wk->sliceq; *pp; pp = &((struct slice_stream *)(*pp)->rq_slice)->next)
        if (*pp == rq) {
            *pp = st->next;
            break;
        }
    free(st);
    rq->rq_slice = NULL;
}

void
slice_wake_all(struct worker *w)
{
    struct req *rq, *next;
    int64_t now = proxy_now_ms();

    for (rq = w->sliceq; rq; rq = next) {
        struct slice_stream *st = rq->rq_slice;
        next = st->next;
        if (!st->want || rq->rq_body_len || rq->rq_step != REQ_HIT
            || (st->fetching && filltab_busy(w->shm->filltab, st->h, (int)w->slotno, now)))
            continue;   /* sending, or its block is still being fetched */
        if (slice_more(rq)) {
            st->want = 0;
        } else if (st->failed) {
            st->want = 0;
            rq->rq_abort = 1;   /* never a complete-looking short body */
        } else {
            continue;           /* its block is being fetched now */
        }
        rq->rq_ops->flush(rq);  /* may end rq, never the next one */
    }
}
