/*
 * cache/lookup.c: the read path (cache_lookup, cache_obj_release,
 * cache_remove), and the pin-and-verify steps the other paths share
 * (cache_ent_pin/unpin, cache_ent_verify).
 *
 * One LMDB read, pin, check alive against the ring, validate the record
 * (head checksum, place, key, lengths; body checksum when needed), hand out
 * iovecs into the mapping.  No copy, no allocation.  After a header refresh
 * an entry names two records, a HEADERS record (off: header block, meta)
 * and the older OBJECT record it links to (body_off: body); a hit pins both
 * segments, checks both alive, validates both, and serves iov[0] from the
 * first and iov[1] from the second.  Either lapped or damaged is a miss.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "cache/cache-int.h"

/*
 * Pin the segments of e's records (one or two), then check both are alive
 * (in that order: Dekker with the writers, ring.c).  Returns 0 with the
 * pins held, or -1 (lapped; nothing held).
 */
int
cache_ent_pin(struct cache *c, const struct cache_ent *e)
{
    cache_pin(c, cache_seg_of(c->shm, e->off));
    if (e->body_off != e->off)
        cache_pin(c, cache_seg_of(c->shm, e->body_off));
    if (cache_ring_alive(c->shm, e->off)
        && (e->body_off == e->off || cache_ring_alive(c->shm, e->body_off)))
        return 0;
    cache_ent_unpin(c, e);
    return -1;
}

void
cache_ent_unpin(struct cache *c, const struct cache_ent *e)
{
    if (e->body_off != e->off)
        cache_unpin(c, cache_seg_of(c->shm, e->body_off));
    cache_unpin(c, cache_seg_of(c->shm, e->off));
}

/* Check the record at off (inside its segment) and that it belongs to key
 * hash / key.  Returns the record, or NULL with *why set. */
static const struct cache_rec *
rec_at(struct cache *c, uint64_t off, unsigned type, const uint8_t hash[16],
       const char *key, size_t keylen, const char **why)
{
    uint64_t so = off % c->g.seg_size;
    const struct cache_rec *r;

    if (so % CACHE_REC_ALIGN) {
        *why = "entry offset not aligned";
        return NULL;
    }
    r = (const struct cache_rec *)cache_ring_ptr(c, off);
    if (cache_rec_check(r, off, c->g.seg_size - so, why) < 0)
        return NULL;
    if (r->type != type || memcmp(r->key_hash, hash, 16) != 0) {
        *why = "record of another object";
        return NULL;
    }
    if (key && (r->key_len != keylen || memcmp(r + 1, key, keylen) != 0)) {
        *why = "key differs (hash collision)";
        return NULL;
    }
    return r;
}

static int
body_sum_ok(const struct cache_rec *b)
{
    return cache_hash64((const uint8_t *)(b + 1) + b->key_len + b->hdr_len, b->body_len,
                        CACHE_BODY_SEED) == b->body_sum;
}

/*
 * Validate the records e points at against e itself (and key / hash): the
 * header record at off (served: header block and meta) and the body
 * record at body_off (served: body), which are one OBJECT record until a
 * header refresh, then a HEADERS record and the older OBJECT record it
 * links to.  That OBJECT record keeps its own (original) header block and
 * head_sum: it is checked whole but its header block is not served.  The
 * caller holds the pins (cache_ent_pin).  Returns 0 with *hout, *bout set,
 * or -1 (logged).
 */
int
cache_ent_verify(struct cache *c, const struct cache_ent *e, const uint8_t hash[16],
                 const char *key, size_t keylen, int want_body_sum,
                 const struct cache_rec **hout, const struct cache_rec **bout)
{
    const struct cache_rec *h, *b;
    struct cache_rec_link l;
    const char *why = NULL;

    if (e->type != CACHE_ENT_OBJECT) {
        why = "entry type not supported yet";
        goto bad;
    }
    if (e->body_off > e->off) {
        why = "body record newer than its header record";
        goto bad;
    }
    if (e->off % c->g.seg_size + e->rec_len > c->g.seg_size) {
        why = "entry lengths out of the segment";
        goto bad;
    }
    h = rec_at(c, e->off, e->body_off == e->off ? CACHE_REC_OBJECT : CACHE_REC_HEADERS,
               hash, key, keylen, &why);
    if (h == NULL)
        goto bad;
    if (h->hdr_len != e->hdr_len || h->body_len != e->body_len || h->rec_len != e->rec_len
        || h->key_len != e->key_len) {
        why = "entry and record lengths differ";
        goto bad;
    }
    b = h;
    if (e->body_off != e->off) {
        cache_rec_link_get(h, &l);
        if (l.body_off != e->body_off) {
            why = "header record links another body";
            goto bad;
        }
        b = rec_at(c, e->body_off, CACHE_REC_OBJECT, hash, key, keylen, &why);
        if (b == NULL)
            goto bad;
        /* body_sum equal too: the very body the refresh was made for. */
        if (b->rec_len != l.body_rec_len || b->body_len != h->body_len
            || b->key_len != h->key_len || b->body_sum != h->body_sum) {
            why = "body record differs from its link";
            goto bad;
        }
    }
    if (want_body_sum && !body_sum_ok(b)) {
        why = "body checksum";
        goto bad;
    }
    *hout = h;
    *bout = b;
    return 0;
bad:
    cache_log_warn("cache: dropping object at %llu: %s", (unsigned long long)e->off, why);
    return -1;
}

/* The index entry of an object whose head record r was written at off,
 * with its body at body_off (the same record for a fill; the old body
 * for a refreshed head), stamped with this epoch. */
void
cache_ent_for_rec(const struct cache *c, struct cache_ent *e, const struct cache_rec *r,
                  uint64_t off, uint64_t body_off)
{
    memset(e, 0, sizeof(*e));
    e->magic = CACHE_ENT_MAGIC;
    e->version = CACHE_ENT_VERSION;
    e->type = CACHE_ENT_OBJECT;
    e->flags = r->flags;
    e->status = r->status;
    e->epoch = c->epoch;
    e->rec_len = r->rec_len;
    e->hdr_len = r->hdr_len;
    e->key_len = r->key_len;
    e->off = off;
    e->body_off = body_off;
    e->body_len = r->body_len;
    e->stored = r->stored;
    e->expires = r->expires;
}

/* A pinned entry's records, checked (their sums too when the store was
 * not shut down cleanly since e was written, or verify is on).  0, or -1
 * after unpinning e and dropping a corrupt entry from the index. */
int
cache_ent_pinned_ok(struct cache *c, const struct cache_ent *e, const uint8_t hash[16],
                    const char *key, size_t keylen, const struct cache_rec **h,
                    const struct cache_rec **b)
{
    int want_sum = c->conf.verify
                   || e->epoch < __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_RELAXED);

    if (cache_ent_verify(c, e, hash, key, keylen, want_sum, h, b) == 0)
        return 0;
    cache_ent_unpin(c, e);
    CTR_ADD(c, corrupt, 1);
    if (cache_index_del(c, hash, e) == CACHE_OK)
        CTR_ADD(c, evictions, 1);
    return -1;
}

/*
 * See cache.h.  The hit path: one LMDB read, one or two pins (a private
 * counter, the shared bit only on 0 -> 1), one or two head checksums.
 */
int
cache_lookup(struct cache *c, const char *key, size_t keylen, struct cache_obj *obj)
{
    struct cache_ent e;
    const struct cache_rec *h, *b;
    uint8_t hash[16];
    int rc;

    assert(c && c->magic == CACHE_MAGIC);
    obj->magic = 0;
    obj->co_pinned = 0;
    cache_key_hash(c, key, keylen, hash);
    rc = cache_index_get(c, hash, &e);
    if (rc != CACHE_OK)
        goto miss;
    if (e.type != CACHE_ENT_OBJECT)
        goto miss;           /* variants: not served by this version */
    if (cache_ent_pin(c, &e) < 0)
        goto miss;           /* overwritten; the manager's sweep drops the entry */
    if (cache_ent_pinned_ok(c, &e, hash, key, keylen, &h, &b) < 0)
        goto miss;
    obj->magic = CACHE_OBJ_MAGIC;
    obj->iov[0].iov_base = (uint8_t *)(uintptr_t)(h + 1) + h->key_len;
    obj->iov[0].iov_len = h->hdr_len;
    obj->iov[1].iov_base = (uint8_t *)(uintptr_t)(b + 1) + b->key_len + b->hdr_len;
    obj->iov[1].iov_len = b->body_len;
    obj->meta.status = h->status;
    obj->meta.flags = h->flags;
    obj->meta.stored = h->stored;
    obj->meta.expires = e.expires < h->expires ? e.expires : h->expires;  /* soft purge */
    obj->body_len = b->body_len;
    obj->hdr_len = h->hdr_len;
    memcpy(obj->key_hash, hash, 16);
    obj->co_seg = cache_seg_of(c->shm, e.off);
    obj->co_body_seg = cache_seg_of(c->shm, e.body_off);
    obj->co_body_off = e.body_off;
    obj->co_pinned = e.body_off == e.off ? 1 : 2;
    CTR_ADD(c, hits, 1);
    CTR_ADD(c, bytes_served, h->hdr_len + b->body_len);
    if (c->shm->eviction == CACHE_EVICT_S3FIFO)
        cache_freq_bump(c, hash);
    return CACHE_OK;
miss:
    CTR_ADD(c, misses, 1);
    return rc == CACHE_ERROR ? CACHE_ERROR : CACHE_MISS;
}

/*
 * See cache.h.
 */
void
cache_obj_release(struct cache *c, struct cache_obj *obj)
{
    if (obj->magic != CACHE_OBJ_MAGIC || !obj->co_pinned)
        return;
    if (obj->co_pinned == 2)
        cache_unpin(c, obj->co_body_seg);
    cache_unpin(c, obj->co_seg);
    obj->co_pinned = 0;
    obj->magic = 0;
}

/*
 * See cache.h.
 */
int
cache_remove(struct cache *c, const char *key, size_t keylen)
{
    uint8_t hash[16];

    cache_key_hash(c, key, keylen, hash);
    return cache_index_del(c, hash, NULL);
}
