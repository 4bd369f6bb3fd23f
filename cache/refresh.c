/*
 * cache/refresh.c: header refresh (a 304, RFC 9111 4.3.4):
 * cache_update_headers and cache_obj_update_headers.
 *
 * A HEADERS record written at the head like a fill, checked, then an index
 * put that is a compare-and-swap on the body record; the body is never
 * copied (update_headers).  A large object gets a new CHAIN record instead
 * (refresh_chain), naming the same extents.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "cache/cache-int.h"

/*
 * A large object's refresh: a new CHAIN record at the head with the new
 * header block and meta and the same extent table (the extents stay where
 * they are), put by compare-and-swap on body_off like a HEADERS record.
 * e and its extents are pinned by the caller, h is its checked CHAIN
 * record.
 */
static int
refresh_chain(struct cache *c, const struct cache_ent *e, const struct cache_rec *h,
              const uint8_t hash[16], const struct cache_meta *meta, const void *hdr,
              size_t hdrlen)
{
    size_t tab = (size_t)h->pad * CACHE_EXT_SIZE;
    uint64_t len = cache_rec_total(h->key_len, (uint32_t)hdrlen, tab), off;
    const uint8_t *src = (const uint8_t *)(h + 1);
    struct cache_rec r;
    struct cache_ent ne;
    const char *why = NULL;
    uint8_t *p;
    int rc;

    if (len > c->g.seg_size)
        return CACHE_TOOBIG;
    if ((rc = cache_reserve(c, len, &off)) != CACHE_OK)
        return rc;
    p = cache_ring_ptr(c, off);
    memset(p, 0, CACHE_REC_SIZE);
    memcpy(p + CACHE_REC_SIZE, src, h->key_len);
    if (hdrlen)
        memcpy(p + CACHE_REC_SIZE + h->key_len, hdr, hdrlen);
    memcpy(p + CACHE_REC_SIZE + h->key_len + hdrlen, src + h->key_len + h->hdr_len, tab);
    r = *h;
    r.flags = meta->flags & (uint16_t)~CACHE_F_STORE_MASK;
    r.status = meta->status;
    r.hdr_len = (uint32_t)hdrlen;
    r.rec_len = (uint32_t)len;
    r.abs_off = off;
    r.stored = meta->stored;
    r.expires = meta->expires;
    cache_rec_seal(&r, p + CACHE_REC_SIZE, h->key_len + hdrlen + tab);
    memcpy(p, &r, sizeof(r));
    rc = CACHE_MISS;
    if (!cache_ring_alive(c->shm, e->body_off))
        goto drop;                      /* lapped meanwhile (maybe by us) */
    if (cache_rec_check((const struct cache_rec *)p, off,
                        c->g.seg_size - off % c->g.seg_size, &why) < 0) {
        cache_log_error("cache: chain record failed its own check after writing: %s", why);
        rc = CACHE_ERROR;
        goto drop;
    }
    cache_ent_for_rec(c, &ne, &r, off, e->body_off);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if ((rc = cache_index_put_if(c, hash, &ne, e->body_off)) != CACHE_OK)
        goto drop;
    CTR_ADD(c, bytes_written, r.rec_len);
    cache_unpin(c, cache_seg_of(c->shm, off));
    return CACHE_OK;
drop:
    memset(p, 0, CACHE_REC_SIZE);
    if (!cache_ring_trim(c, off, len, 0))
        cache_write_hole(c, off, len);
    cache_unpin(c, cache_seg_of(c->shm, off));
    if (rc != CACHE_MISS)
        CTR_ADD(c, fill_failures, 1);
    return rc;
}

/*
 * Write a HEADERS record at the head that links to the body record of the
 * entry stored under key, and point the entry at both.  The body is never
 * copied: it stays in its OBJECT record until the ring laps it.  Order is
 * the fills' order: record written, sealed and read back through the
 * validator, then the index put, which is conditional (compare-and-swap
 * in the write txn) on the entry still serving the same body record: a
 * refresh never resurrects a removed object and never lands on a body
 * filled meanwhile.  held_body (optional) pins the refresh to the body the
 * caller revalidated.
 *
 * Pins: the entry's records are pinned (on top of whatever the caller
 * holds: counts, never waits) from before they are validated until the
 * entry is committed, and the new record's segment is pinned by its
 * reservation.  A reservation can lap the body's segment only in the
 * sense of the alive rule (writers skip pinned segments), so the body is
 * re-checked alive after it.
 */
static int
update_headers(struct cache *c, const char *key, size_t keylen, const uint64_t *held_body,
               const struct cache_meta *meta, const void *hdr, size_t hdrlen)
{
    struct cache_ent e, ne;
    const struct cache_rec *h, *b;
    struct cache_rec r;
    struct cache_rec_link l;
    uint8_t hash[16], *p;
    uint64_t len, off;
    uint32_t seg;
    const char *why = NULL;
    int rc;

    if (key == NULL || keylen == 0 || meta == NULL || (hdrlen && hdr == NULL))
        return CACHE_INVAL;
    if (keylen > c->g.seg_size || hdrlen > c->g.seg_size)
        return CACHE_TOOBIG;
    len = cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen, CACHE_LINK_SIZE);
    if (len > c->g.seg_size)
        return CACHE_TOOBIG;
    cache_key_hash(c, key, keylen, hash);
    if ((rc = cache_index_get(c, hash, &e)) != CACHE_OK)
        return rc;
    if (e.type != CACHE_ENT_OBJECT || (held_body && e.body_off != *held_body))
        return CACHE_MISS;
    if (cache_ent_pin(c, &e) < 0)
        return CACHE_MISS;
    /* The new entry is stamped with this epoch: a body from before an
     * unclean shutdown must be verified now, or the refresh would launder
     * it into a trusted entry. */
    if (cache_ent_pinned_ok(c, &e, hash, key, keylen, &h, &b) < 0)
        return CACHE_MISS;
    if (h->type == CACHE_REC_CHAIN) {
        rc = refresh_chain(c, &e, h, hash, meta, hdr, hdrlen);
        cache_ent_unpin(c, &e);
        return rc;
    }
    memset(&l, 0, sizeof(l));
    l.body_off = e.body_off;
    l.body_rec_len = b->rec_len;
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_HEADERS;
    r.flags = meta->flags & (uint16_t)~CACHE_F_STORE_MASK;
    r.status = meta->status;
    r.key_len = (uint32_t)keylen;
    r.hdr_len = (uint32_t)hdrlen;
    r.rec_len = (uint32_t)len;
    r.body_len = b->body_len;
    r.stored = meta->stored;
    r.expires = meta->expires;
    memcpy(r.key_hash, hash, 16);
    r.body_sum = b->body_sum;
    if ((rc = cache_reserve(c, len, &off)) != CACHE_OK) {
        cache_ent_unpin(c, &e);
        CTR_ADD(c, fill_failures, 1);
        return rc;
    }
    seg = cache_seg_of(c->shm, off);
    p = cache_ring_ptr(c, off);
    if (!cache_ring_alive(c->shm, e.body_off)) {
        rc = CACHE_MISS;                /* lapped meanwhile (maybe by us) */
        goto drop;
    }
    /* Header struct last, as in a fill: until then the bytes validate as
     * nothing. */
    memset(p, 0, CACHE_REC_SIZE);
    memcpy(p + CACHE_REC_SIZE, key, keylen);
    if (hdrlen)
        memcpy(p + CACHE_REC_SIZE + keylen, hdr, hdrlen);
    memcpy(p + CACHE_REC_SIZE + keylen + hdrlen, &l, sizeof(l));
    r.abs_off = off;
    cache_rec_seal(&r, p + CACHE_REC_SIZE, keylen + hdrlen + CACHE_LINK_SIZE);
    memcpy(p, &r, sizeof(r));
    if (cache_rec_check((const struct cache_rec *)p, off, c->g.seg_size - off % c->g.seg_size,
                        &why) < 0) {
        cache_log_error("cache: header record failed its own check after writing: %s", why);
        rc = CACHE_ERROR;
        goto drop;
    }
    cache_ent_for_rec(c, &ne, &r, off, e.body_off);
    /* The record's bytes must be visible before the entry that points at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_put_if(c, hash, &ne, e.body_off);
    if (rc != CACHE_OK)
        goto drop;
    CTR_ADD(c, bytes_written, r.rec_len);
    cache_unpin(c, seg);
    cache_ent_unpin(c, &e);
    return CACHE_OK;

drop:
    /* Nothing points at it: unseal it so no scan mistakes it for live. */
    memset(p, 0, CACHE_REC_SIZE);
    if (!cache_ring_trim(c, off, len, 0))
        cache_write_hole(c, off, len);
    cache_unpin(c, seg);
    cache_ent_unpin(c, &e);
    if (rc != CACHE_MISS)
        CTR_ADD(c, fill_failures, 1);
    return rc;
}

/*
 * See cache.h.
 */
int
cache_update_headers(struct cache *c, const char *key, size_t keylen,
                     const struct cache_meta *meta, const void *hdr, size_t hdrlen)
{
    assert(c && c->magic == CACHE_MAGIC);
    return update_headers(c, key, keylen, NULL, meta, hdr, hdrlen);
}

/*
 * See cache.h.
 */
int
cache_obj_update_headers(struct cache *c, const struct cache_obj *held, const char *key,
                         size_t keylen, const struct cache_meta *meta, const void *hdr,
                         size_t hdrlen)
{
    uint8_t hash[16];

    assert(c && c->magic == CACHE_MAGIC);
    if (held == NULL || held->magic != CACHE_OBJ_MAGIC || !held->co_pinned || key == NULL)
        return CACHE_INVAL;
    cache_key_hash(c, key, keylen, hash);
    if (memcmp(hash, held->key_hash, 16) != 0)
        return CACHE_INVAL;
    return update_headers(c, key, keylen, &held->co_body_off, meta, hdr, hdrlen);
}
