/*
 * cache/evict.c: eviction (S3-FIFO style, FORMAT.md "Eviction"), and the
 * writers' reservation that drives it (cache_reserve).
 *
 * Hits bump a counter in shm (ring.c); the process whose reservation moves
 * the head into segment A walks segment A + 1 (about to be lapped) and
 * copies its hot, fresh records to the head like fills, then swaps the
 * index entries by compare-and-swap in one txn per batch (evict_*).  At
 * most half a segment per segment.  The ring only reports that a
 * reservation entered a new segment; the writer (cache_reserve) then calls
 * cache_evict_ahead, and the relocations here reserve with the ring's own
 * cache_ring_reserve, which never evicts: no re-entrancy to guard against.
 */
#include "config.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

#include "cache/cache-int.h"

/* Relocations per index txn: one txn costs about as much as a few dozen
 * puts inside it, and 64 keeps the pins held for a batch (two per copy)
 * and the on-stack batch (~12 KiB) small. */
#define EVICT_BATCH 64

struct evict_run {
    uint64_t          budget;   /* record bytes this segment may still rewrite */
    int64_t           now;
    int               n;
    int               stop;
    int               moved;
    struct cache_ent  old[EVICT_BATCH];     /* pinned (cache_ent_pin) until flushed */
    uint32_t          seg[EVICT_BATCH];     /* segment of the new record (pinned) */
    struct cache_swap sw[EVICT_BATCH];
};

/* Publish a batch: one txn of compare-and-swaps, then drop the pins.  A
 * record whose swap failed (the object was refilled, refreshed or removed
 * meanwhile) is turned into a hole, so no scan of the segments can
 * mistake it for live. */
static void
evict_flush(struct cache *c, struct evict_run *er)
{
    int rc;

    if (er->n == 0)
        return;
    /* The records' bytes must be visible before the entries that point at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_swap(c, er->sw, er->n);
    if (rc < 0)
        er->stop = 1;
    for (int i = 0; i < er->n; i++) {
        struct cache_swap *w = &er->sw[i];

        if (w->done) {
            cache_freq_decay(c, w->hash);
            CTR_ADD(c, relocations, 1);
            CTR_ADD(c, bytes_relocated, w->ne.rec_len);
            er->moved++;
        } else {
            cache_write_hole(c, w->ne.off, w->ne.rec_len);
        }
        cache_unpin(c, er->seg[i]);
        cache_ent_unpin(c, &er->old[i]);
    }
    er->n = 0;
}

/*
 * The OBJECT record r at p (in the segment being prepared, pinned by the
 * caller) is hot: if the index still serves its body from p and the
 * object is fresh, copy it to a new record at the head.  The copy is
 * made like a fill: reserve, write everything but the header struct,
 * seal, read back through the validator; it is published by evict_flush.
 */
static void
evict_one(struct cache *c, struct evict_run *er, uint64_t p, const struct cache_rec *r)
{
    struct cache_ent e, *ne;
    const struct cache_rec *h, *b;
    struct cache_rec nr;
    uint8_t hash[16], *dst;
    const char *key = (const char *)(r + 1), *why = NULL;
    uint64_t len, off;
    int want_sum, entered;

    memcpy(hash, r->key_hash, 16);
    if (cache_index_get(c, hash, &e) != CACHE_OK || e.type != CACHE_ENT_OBJECT
        || e.body_off != p)
        return;                 /* replaced, refreshed elsewhere or removed: not ours */
    if (e.expires <= er->now) {
        cache_freq_clear(c, hash);      /* stale: let it go, and a refetch starts cold */
        return;
    }
    if (cache_ent_pin(c, &e) < 0)
        return;
    want_sum = c->conf.verify
               || e.epoch < __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_RELAXED);
    if (cache_ent_verify(c, &e, hash, key, r->key_len, want_sum, &h, &b) < 0)
        goto unpin;             /* the next lookup deletes it */
    len = cache_rec_total(h->key_len, h->hdr_len, b->body_len);
    if (len > er->budget) {
        er->stop = 1;
        goto unpin;
    }
    if (er->n == EVICT_BATCH)
        evict_flush(c, er);
    if (cache_ring_reserve(c, len, &off, &entered) != CACHE_OK) {
        er->stop = 1;
        goto unpin;
    }
    dst = cache_ring_ptr(c, off);
    /* The reservation may have moved the head past the source: the
     * records are pinned, so that means "skipped", and they are dead. */
    if (!cache_ring_alive(c->shm, e.off) || !cache_ring_alive(c->shm, e.body_off)) {
        er->stop = 1;
        cache_write_hole(c, off, len);
        cache_unpin(c, cache_seg_of(c->shm, off));
        goto unpin;
    }
    memset(dst, 0, CACHE_REC_SIZE);
    memcpy(dst + CACHE_REC_SIZE, key, h->key_len);
    memcpy(dst + CACHE_REC_SIZE + h->key_len, (const uint8_t *)(h + 1) + h->key_len,
           h->hdr_len);
    memcpy(dst + CACHE_REC_SIZE + h->key_len + h->hdr_len,
           (const uint8_t *)(b + 1) + b->key_len + b->hdr_len, b->body_len);
    memset(&nr, 0, sizeof(nr));
    nr.magic = CACHE_REC_MAGIC;
    nr.version = CACHE_REC_VERSION;
    nr.type = CACHE_REC_OBJECT;
    nr.flags = h->flags;
    nr.status = h->status;
    nr.key_len = h->key_len;
    nr.hdr_len = h->hdr_len;
    nr.rec_len = (uint32_t)len;
    nr.abs_off = off;
    nr.body_len = b->body_len;
    nr.stored = h->stored;
    nr.expires = h->expires;
    memcpy(nr.key_hash, hash, 16);
    /* The body is copied from pinned bytes: its sum carries over (and a
     * body damaged on disk keeps failing its check). */
    nr.body_sum = b->body_sum;
    cache_rec_seal(&nr, dst + CACHE_REC_SIZE, (size_t)nr.key_len + nr.hdr_len);
    memcpy(dst, &nr, sizeof(nr));
    if (cache_rec_check((const struct cache_rec *)dst, off,
                        c->g.seg_size - off % c->g.seg_size, &why) < 0) {
        cache_log_error("cache: relocated record failed its own check: %s", why);
        er->stop = 1;
        cache_write_hole(c, off, len);
        cache_unpin(c, cache_seg_of(c->shm, off));
        goto unpin;
    }
    er->budget -= len;
    er->old[er->n] = e;
    er->seg[er->n] = cache_seg_of(c->shm, off);
    memcpy(er->sw[er->n].hash, hash, 16);
    er->sw[er->n].old_off = e.off;
    er->sw[er->n].old_body_off = e.body_off;
    ne = &er->sw[er->n].ne;
    memset(ne, 0, sizeof(*ne));
    ne->magic = CACHE_ENT_MAGIC;
    ne->version = CACHE_ENT_VERSION;
    ne->type = CACHE_ENT_OBJECT;
    ne->flags = nr.flags;
    ne->status = nr.status;
    ne->epoch = c->epoch;
    ne->rec_len = nr.rec_len;
    ne->hdr_len = nr.hdr_len;
    ne->key_len = nr.key_len;
    ne->off = off;
    ne->body_off = off;
    ne->body_len = nr.body_len;
    ne->stored = nr.stored;
    ne->expires = nr.expires;
    er->n++;
    return;
unpin:
    cache_ent_unpin(c, &e);
}

/*
 * Prepare absolute segment src for being overwritten: walk its records
 * and rewrite the hot, fresh ones at the head, within a budget of half a
 * segment (so the head always gains at least half a segment per lap of
 * eviction work).  The segment is pinned for the walk, so its bytes stay
 * put even if the head reaches it meanwhile (the head then skips it, the
 * walk sees it dead and stops).  Returns the number of objects relocated.
 */
int
cache_evict_segment(struct cache *c, uint64_t src)
{
    struct cache_shm *s = c->shm;
    struct evict_run run, *er = &run;   /* ~12 KiB: no allocation */
    uint64_t base = src * s->seg_size, end = base + s->seg_size, p;
    uint32_t seg = (uint32_t)(src % s->nseg);

    memset(er, 0, offsetof(struct evict_run, old));
    er->budget = s->seg_size / 2;
    er->now = (int64_t)time(NULL);
    cache_pin(c, seg);
    for (p = base; !er->stop && p + CACHE_REC_SIZE <= end;) {
        const struct cache_rec *r = (const struct cache_rec *)cache_ring_ptr(c, p);
        const char *why;

        if (!cache_ring_alive(s, p))
            break;              /* lapped (skipped) or below the floor */
        if (cache_rec_check(r, p, end - p, &why) < 0) {
            p += CACHE_REC_ALIGN;       /* aborted fill, unused tail: resync */
            continue;
        }
        if (r->type == CACHE_REC_OBJECT && cache_freq_get(c, r->key_hash) >= CACHE_FREQ_HOT)
            evict_one(c, er, p, r);
        p += r->rec_len;
    }
    evict_flush(c, er);
    cache_unpin(c, seg);
    return er->moved;
}

/*
 * The head is in cur_seg: prepare the segment it will enter next (the
 * records lapped there, nseg segments ago), unless some process already
 * claimed it.  Called by whichever process moved the head into a new
 * segment (cache_reserve), and by the manager's tick as a backstop.
 * Returns the number of objects relocated.
 */
int
cache_evict_ahead(struct cache *c)
{
    struct cache_shm *s = c->shm;
    uint64_t want, old;

    if (s->eviction != CACHE_EVICT_S3FIFO)
        return 0;
    want = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST) + 1;
    if (want < s->nseg)
        return 0;               /* first lap: that slot holds nothing yet */
    old = __atomic_load_n(&s->evict_next, __ATOMIC_SEQ_CST);
    do {
        if (old >= want)
            return 0;
    } while (!__atomic_compare_exchange_n(&s->evict_next, &old, want, 0, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
    return cache_evict_segment(c, want - s->nseg);
}

/*
 * See cache-int.h.  The head just entered a new segment A: the next one it
 * enters is A + 1, so this is the moment to save what is hot there (while A
 * has a whole segment of room for it).  Relocations (evict_one) reserve
 * with cache_ring_reserve directly, so they never start another walk.
 */
int
cache_reserve(struct cache *c, uint64_t len, uint64_t *off)
{
    int entered = 0;
    int rc = cache_ring_reserve(c, len, off, &entered);

    if (rc == CACHE_OK && entered)
        cache_evict_ahead(c);
    return rc;
}
