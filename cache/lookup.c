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
 * The CHAIN record e->off names, when it is one (a large object), else
 * NULL.  Only the shape is looked at (magic, type, place, the table inside
 * the record's segment): the caller holds the pin on e->off, so the bytes
 * cannot change between cache_ent_pin and cache_ent_unpin, and both see
 * the same table; cache_ent_verify checks the checksums.
 */
const struct cache_rec *
cache_ent_chain(const struct cache *c, const struct cache_ent *e)
{
    const struct cache_rec *r;
    uint64_t so = e->off % c->g.seg_size;

    if (e->body_off == e->off || so % CACHE_REC_ALIGN || so + CACHE_REC_SIZE > c->g.seg_size)
        return NULL;
    r = (const struct cache_rec *)cache_ring_ptr(c, e->off);
    if (r->magic != CACHE_REC_MAGIC || r->type != CACHE_REC_CHAIN || r->abs_off != e->off
        || r->pad == 0
        || so + cache_rec_total(r->key_len, r->hdr_len, (uint64_t)r->pad * CACHE_EXT_SIZE)
           > c->g.seg_size)
        return NULL;
    return r;
}

/* Pin or unpin (pin = 1 / 0) the segments of a chain's extents. */
static void
chain_pins(struct cache *c, const struct cache_rec *h, int pin)
{
    struct cache_ext x;

    for (uint32_t i = 0; i < h->pad; i++) {
        cache_chain_ext(h, i, &x);
        if (pin)
            cache_pin(c, cache_seg_of(c->shm, x.off));
        else
            cache_unpin(c, cache_seg_of(c->shm, x.off));
    }
}

static int
ent_alive(const struct cache *c, const struct cache_ent *e)
{
    return cache_ring_alive(c->shm, e->off)
           && (e->body_off == e->off || cache_ring_alive(c->shm, e->body_off));
}

static void
ent_unpin2(struct cache *c, const struct cache_ent *e)
{
    if (e->body_off != e->off)
        cache_unpin(c, cache_seg_of(c->shm, e->body_off));
    cache_unpin(c, cache_seg_of(c->shm, e->off));
}

/*
 * Pin the segments of e's records (one or two; for a large object also
 * every extent's), then check them alive (in that order: Dekker with the
 * writers, ring.c).  A large object's extents all lie between body_off
 * (extent 0, the oldest) and off (the CHAIN record, the newest), so those
 * two alive means all alive.  Returns 0 with the pins held, or -1
 * (lapped; nothing held).
 */
int
cache_ent_pin(struct cache *c, const struct cache_ent *e)
{
    const struct cache_rec *h;

    cache_pin(c, cache_seg_of(c->shm, e->off));
    if (e->body_off != e->off)
        cache_pin(c, cache_seg_of(c->shm, e->body_off));
    if (!ent_alive(c, e)) {
        ent_unpin2(c, e);
        return -1;
    }
    if ((h = cache_ent_chain(c, e)) != NULL) {
        chain_pins(c, h, 1);
        if (!ent_alive(c, e)) {
            chain_pins(c, h, 0);
            ent_unpin2(c, e);
            return -1;
        }
    }
    return 0;
}

void
cache_ent_unpin(struct cache *c, const struct cache_ent *e)
{
    const struct cache_rec *h = cache_ent_chain(c, e);

    if (h != NULL)
        chain_pins(c, h, 0);
    ent_unpin2(c, e);
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
 * Check a large object's extents against the table of its CHAIN record h
 * (head_sum already checked, so the table is the one written): in body
 * order, oldest first, extent 0 at body_off, all older than h, each a valid
 * EXTENT record of this key with the listed number, lengths and body_sum
 * (and body bytes, with want_sum), the lengths adding up to the body.
 * Returns NULL, or why not.
 */
static const char *
chain_check(struct cache *c, const struct cache_ent *e, const struct cache_rec *h,
            const uint8_t hash[16], int want_sum)
{
    struct cache_ext x;
    uint64_t total = 0, prev = 0;
    const char *why = NULL;

    for (uint32_t i = 0; i < h->pad; i++) {
        const struct cache_rec *r;

        cache_chain_ext(h, i, &x);
        if ((i == 0 ? x.off != e->body_off : x.off <= prev) || x.off >= e->off)
            return "extent table out of order";
        if ((r = rec_at(c, x.off, CACHE_REC_EXTENT, hash, NULL, 0, &why)) == NULL)
            return why;
        if (r->pad != i || r->body_len != x.body_len || r->body_sum != x.body_sum
            || r->rec_len != x.rec_len || (uint64_t)r->key_len + r->hdr_len != x.skip
            || x.body_len == 0)
            return "extent differs from its table entry";
        if (want_sum && !body_sum_ok(r))
            return "extent body checksum";
        total += x.body_len;
        prev = x.off;
    }
    return total == h->body_len ? NULL : "extents do not add up to the body";
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
    if (h == NULL && e->body_off != e->off && cache_ent_chain(c, e) != NULL)
        h = rec_at(c, e->off, CACHE_REC_CHAIN, hash, key, keylen, &why);
    if (h == NULL)
        goto bad;
    if (h->hdr_len != e->hdr_len || h->body_len != e->body_len || h->rec_len != e->rec_len
        || h->key_len != e->key_len) {
        why = "entry and record lengths differ";
        goto bad;
    }
    b = h;
    if (h->type == CACHE_REC_CHAIN) {
        if ((why = chain_check(c, e, h, hash, want_body_sum)) != NULL)
            goto bad;
        want_body_sum = 0;      /* chain_check did it, extent by extent */
    } else if (e->body_off != e->off) {
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
static inline int cache_lookup_as(struct cache *c, const char *key, size_t keylen,
                                  const uint8_t hash[16], struct cache_obj *obj, int count)
    __attribute__((always_inline));

int
cache_lookup(struct cache *c, const char *key, size_t keylen, struct cache_obj *obj)
{
    uint8_t hash[16];

    cache_key_hash(c, key, keylen, hash);
    return cache_lookup_hashed(c, key, keylen, hash, obj);
}

int
cache_lookup_hashed(struct cache *c, const char *key, size_t keylen, const uint8_t hash[16],
                    struct cache_obj *obj)
{
    return cache_lookup_as(c, key, keylen, hash, obj, 1);
}

int
cache_probe_hashed(struct cache *c, const char *key, size_t keylen, const uint8_t hash[16],
                   struct cache_obj *obj)
{
    return cache_lookup_as(c, key, keylen, hash, obj, 0);
}

/* cache_lookup_hashed, counting the hit or miss (and the bytes served)
 * when count is set (inlined in both: the hit path pays no call more). */
static inline int
cache_lookup_as(struct cache *c, const char *key, size_t keylen, const uint8_t hash[16],
                struct cache_obj *obj, int count)
{
    struct cache_ent e;
    const struct cache_rec *h, *b;
    int rc;

    assert(c && c->magic == CACHE_MAGIC);
    obj->magic = 0;
    obj->co_pinned = 0;
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
    obj->co_chain = NULL;
    if (h->type == CACHE_REC_CHAIN) {
        struct cache_ext x;

        cache_chain_ext(h, 0, &x);
        obj->co_chain = h;
        obj->iov[1].iov_base = cache_ring_ptr(c, x.off) + CACHE_REC_SIZE + x.skip;
        obj->iov[1].iov_len = x.body_len;
    } else {
        obj->iov[1].iov_base = (uint8_t *)(uintptr_t)(b + 1) + b->key_len + b->hdr_len;
        obj->iov[1].iov_len = b->body_len;
    }
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
    obj->co_off = e.off;
    obj->co_pinned = obj->co_chain ? 3 : e.body_off == e.off ? 1 : 2;
    if (count) {
        CTR_ADD(c, hits, 1);
        CTR_ADD(c, bytes_served, h->hdr_len + b->body_len);
    }
    if (c->shm->eviction == CACHE_EVICT_S3FIFO)
        cache_freq_bump(c, hash);
    return CACHE_OK;
miss:
    if (count)
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
    if (obj->co_pinned == 3) {
        struct cache_ent e;

        memset(&e, 0, sizeof(e));
        e.off = obj->co_off;
        e.body_off = obj->co_body_off;
        cache_ent_unpin(c, &e);     /* the chain, still pinned, names the extents */
        obj->co_pinned = 0;
        obj->magic = 0;
        return;
    }
    if (obj->co_pinned == 2)
        cache_unpin(c, obj->co_body_seg);
    cache_unpin(c, obj->co_seg);
    obj->co_pinned = 0;
    obj->magic = 0;
}

/*
 * See cache.h.  A large object's table is read from its CHAIN record
 * (pinned while o is held): one small copy per extent passed over.
 */
size_t
cache_obj_span(struct cache *c, const struct cache_obj *o, uint64_t pos, const void **p)
{
    const struct cache_rec *h = o->co_chain;
    struct cache_ext x;
    uint64_t at = 0;

    *p = NULL;
    if (o->magic != CACHE_OBJ_MAGIC || pos >= o->body_len)
        return 0;
    if (h == NULL) {
        *p = (const uint8_t *)o->iov[1].iov_base + pos;
        return (size_t)(o->body_len - pos);
    }
    for (uint32_t i = 0; i < h->pad; i++, at += x.body_len) {
        cache_chain_ext(h, i, &x);
        if (pos < at + x.body_len) {
            *p = cache_ring_ptr(c, x.off) + CACHE_REC_SIZE + x.skip + (pos - at);
            return (size_t)(at + x.body_len - pos);
        }
    }
    return 0;
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
