/*
 * cache/fill.c: the write path, fills (cache_fill_begin/write/commit/abort).
 *
 * Reserve space at the head (cache_reserve, evict.c, which also drives
 * eviction when the reservation entered a new segment) and pin its segment;
 * copy the key and header block in; append the body; at commit compute the
 * body checksum, write and seal the record header, read it back through the
 * validator, and only then put the index entry.  A fill that dies before
 * commit leaves bytes nobody points at.  Fills of unknown length grow in
 * place while they are the last reservation, and otherwise move to a fresh,
 * twice-as-large reservation (copying what they wrote: at most doubling, so
 * amortised one extra copy); the abandoned extent is marked as a hole.
 *
 * Fill slots are preallocated per process (conf.max_fills, store.c); a
 * struct cache_fill belongs to the process that began it and must not cross
 * fork.
 */
#define FILL_CHUNK   (16u << 10)    /* first extent of an unknown-length fill: most chunked pages fit */
#include "config.h"

#include <assert.h>
#include <string.h>
#include <time.h>

#include "cache/cache-int.h"

/* Mark [off, off + len) as dead space, when a header fits.  (Fills,
 * refreshes and eviction all leave holes.) */
void
cache_write_hole(struct cache *c, uint64_t off, uint64_t len)
{
    struct cache_rec r;

    if (len < CACHE_REC_SIZE)
        return;
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_HOLE;
    r.rec_len = (uint32_t)len;
    r.abs_off = off;
    cache_rec_seal(&r, NULL, 0);
    memcpy(cache_ring_ptr(c, off), &r, sizeof(r));
}

static void
fill_release(struct cache_fill *f)
{
    if (f->pinned)
        cache_unpin(f->c, f->seg);
    f->pinned = 0;
    f->state = FILL_FREE;
}

static int
fill_fail(struct cache_fill *f, int rc)
{
    f->state = FILL_DEAD;
    CTR_ADD(f->c, fill_failures, 1);
    return rc;
}

/*
 * See cache.h.
 */
int
cache_fill_begin(struct cache *c, const char *key, size_t keylen,
                 const struct cache_meta *meta, const void *hdr, size_t hdrlen,
                 int64_t body_len, struct cache_fill **out)
{
    struct cache_fill *f = NULL;
    uint64_t len;
    uint8_t *p;
    int rc;

    assert(c && c->magic == CACHE_MAGIC);
    *out = NULL;
    if (key == NULL || keylen == 0 || meta == NULL || body_len < -1
        || (hdrlen && hdr == NULL))
        return CACHE_INVAL;
    if (keylen > c->g.seg_size || hdrlen > c->g.seg_size
        || (body_len >= 0 && (uint64_t)body_len > c->max_doc)) {
        rc = CACHE_TOOBIG;
        goto refuse;
    }
    len = cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen,
                          body_len >= 0 ? (uint64_t)body_len : FILL_CHUNK);
    if (body_len < 0 && len > c->g.seg_size)
        len = c->g.seg_size;
    if (cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen,
                        body_len >= 0 ? (uint64_t)body_len : 0) > c->g.seg_size) {
        rc = CACHE_TOOBIG;
        goto refuse;
    }
    for (int i = 0; i < c->nfills; i++)
        if (c->fills[i].state == FILL_FREE) {
            f = &c->fills[i];
            break;
        }
    if (f == NULL) {
        rc = CACHE_BUSY;
        goto refuse;
    }
    memset(f, 0, sizeof(*f));
    if ((rc = cache_reserve(c, len, &f->off)) != CACHE_OK)
        goto refuse;
    f->magic = CACHE_FILL_MAGIC;
    f->state = FILL_OPEN;
    f->c = c;
    f->seg = cache_seg_of(c->shm, f->off);
    f->pinned = 1;
    f->ext_len = len;
    f->key_len = (uint32_t)keylen;
    f->hdr_len = (uint32_t)hdrlen;
    f->want = body_len;
    f->meta = *meta;
    f->meta.flags &= (uint16_t)~CACHE_F_STORE_MASK;
    f->purge_gen = cache_purge_gen(c);
    cache_key_hash(c, key, keylen, f->hash);
    p = cache_ring_ptr(c, f->off);
    /* No header yet: a crash now leaves bytes that validate as nothing. */
    memset(p, 0, CACHE_REC_SIZE);
    memcpy(p + CACHE_REC_SIZE, key, keylen);
    if (hdrlen)
        memcpy(p + CACHE_REC_SIZE + keylen, hdr, hdrlen);
    *out = f;
    return CACHE_OK;
refuse:
    CTR_ADD(c, fill_failures, 1);
    return rc;
}

/* Move an unknown-length fill to a fresh reservation of new_len bytes. */
static int
fill_relocate(struct cache_fill *f, uint64_t new_len)
{
    struct cache *c = f->c;
    uint64_t off, used = CACHE_REC_SIZE + f->key_len + f->hdr_len + f->body_len;
    uint32_t oldseg = f->seg;
    int rc;

    if ((rc = cache_reserve(c, new_len, &off)) != CACHE_OK)
        return rc;
    memcpy(cache_ring_ptr(c, off), cache_ring_ptr(c, f->off), used);
    if (!cache_ring_trim(c, f->off, f->ext_len, 0))
        cache_write_hole(c, f->off, f->ext_len);
    cache_unpin(c, oldseg);
    f->off = off;
    f->ext_len = new_len;
    f->seg = cache_seg_of(c->shm, off);
    return CACHE_OK;
}

/*
 * See cache.h.
 */
int
cache_fill_write(struct cache_fill *f, const void *data, size_t len)
{
    struct cache *c;
    uint64_t nb, need;
    int rc;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    if (f->state != FILL_OPEN)
        return CACHE_ABORTED;
    c = f->c;
    nb = f->body_len + len;
    if ((f->want >= 0 && nb > (uint64_t)f->want) || nb > c->max_doc)
        return fill_fail(f, CACHE_TOOBIG);
    need = cache_rec_total(f->key_len, f->hdr_len, nb);
    if (need > c->g.seg_size)
        return fill_fail(f, CACHE_TOOBIG);
    if (need > f->ext_len) {
        uint64_t grow = f->ext_len * 2;

        assert(f->want < 0);
        if (grow > c->g.seg_size)
            grow = c->g.seg_size;
        if (grow < need)
            grow = need;
        if (cache_ring_extend(c, f->off, f->ext_len, grow) == CACHE_OK)
            f->ext_len = grow;
        else if ((rc = fill_relocate(f, grow)) != CACHE_OK)
            return fill_fail(f, rc);
    }
    memcpy(cache_ring_ptr(c, f->off) + CACHE_REC_SIZE + f->key_len + f->hdr_len + f->body_len,
           data, len);
    f->body_len = nb;
    return CACHE_OK;
}

/*
 * See cache.h.
 */
int
cache_fill_commit(struct cache_fill *f, int *replaced)
{
    struct cache *c;
    struct cache_rec r;
    struct cache_ent e;
    uint8_t *p;
    const char *why = NULL;
    int rc;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    c = f->c;
    if (replaced)
        *replaced = 0;
    if (f->state != FILL_OPEN) {
        fill_release(f);
        return CACHE_ABORTED;
    }
    if (f->want >= 0 && f->body_len != (uint64_t)f->want) {
        rc = fill_fail(f, CACHE_ABORTED);       /* short body: origin closed early */
        goto out;
    }
    if (!cache_ring_alive(c->shm, f->off)) {
        rc = fill_fail(f, CACHE_ABORTED);       /* the ring lapped the fill */
        goto out;
    }
    p = cache_ring_ptr(c, f->off);
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_OBJECT;
    r.flags = f->meta.flags;
    r.status = f->meta.status;
    r.key_len = f->key_len;
    r.hdr_len = f->hdr_len;
    r.body_len = f->body_len;
    r.rec_len = (uint32_t)cache_rec_total(f->key_len, f->hdr_len, f->body_len);
    r.abs_off = f->off;
    r.stored = f->meta.stored;
    r.expires = f->meta.expires;
    memcpy(r.key_hash, f->hash, 16);
    r.body_sum = cache_hash64(p + CACHE_REC_SIZE + f->key_len + f->hdr_len, f->body_len,
                              CACHE_BODY_SEED);
    cache_rec_seal(&r, p + CACHE_REC_SIZE, (size_t)f->key_len + f->hdr_len);
    memcpy(p, &r, sizeof(r));
    assert(r.rec_len <= f->ext_len);
    if (f->ext_len > r.rec_len
        && !cache_ring_trim(c, f->off, f->ext_len, r.rec_len))
        cache_write_hole(c, f->off + r.rec_len, f->ext_len - r.rec_len);
    if (cache_rec_check((const struct cache_rec *)p, f->off,
                        c->g.seg_size - f->off % c->g.seg_size, &why) < 0) {
        cache_log_error("cache: record failed its own check after writing: %s", why);
        rc = fill_fail(f, CACHE_ERROR);
        goto out;
    }
    cache_ent_for_rec(c, &e, &r, f->off, f->off);
    /* a purge ran while this fill was open: what it stores may be what the
     * purge meant to remove, so it is stored stale (purge.c) */
    if (cache_purge_gen(c) != f->purge_gen && e.expires > (int64_t)time(NULL) - 1)
        e.expires = (int64_t)time(NULL) - 1;
    /* The record's bytes must be visible before the entry that points at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_put(c, f->hash, &e, replaced);
    if (rc != CACHE_OK) {
        fill_fail(f, rc);
        goto out;
    }
    CTR_ADD(c, fills, 1);
    CTR_ADD(c, bytes_written, r.rec_len);
out:
    fill_release(f);
    return rc;
}

/*
 * See cache.h.
 */
void
cache_fill_abort(struct cache_fill *f)
{
    if (f == NULL)
        return;
    assert(f->magic == CACHE_FILL_MAGIC);
    if (f->state == FILL_FREE)
        return;
    if (f->state == FILL_OPEN) {
        CTR_ADD(f->c, fill_failures, 1);
        if (!cache_ring_trim(f->c, f->off, f->ext_len, 0))
            cache_write_hole(f->c, f->off, f->ext_len);
    }
    fill_release(f);
}
