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
 * Objects larger than a segment (FORMAT.md "Large objects"): when the body
 * outgrows its record's segment, that record becomes extent 0 (sealed as
 * an EXTENT record, key and header block included), and the body goes on
 * in further EXTENT records, one reservation of up to a segment each, all
 * kept pinned until the end.  Commit seals the last one and writes the
 * CHAIN record (key, header block, the extent table) at the head: the
 * newest record of the object, so the index entry names the CHAIN record
 * (off) and extent 0 (body_off, the oldest), and the ring's alive rule on
 * those two covers every extent between them.
 *
 * Fill slots are preallocated per process (conf.max_fills, store.c); a
 * struct cache_fill belongs to the process that began it and must not cross
 * fork.
 */
#define FILL_CHUNK   (16u << 10)    /* first extent of an unknown-length fill: most chunked pages fit */
#include "config.h"

#include <assert.h>
#include <stdlib.h>
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
    for (uint32_t i = 0; i < f->next; i++)
        cache_unpin(f->c, cache_seg_of(f->c->shm, f->ext[i].off));
    free(f->ext);
    f->ext = NULL;
    f->next = f->next_cap = 0;
    f->pinned = 0;
    f->state = FILL_FREE;
}

/* Give back (or mark dead) what a failed fill wrote: its sealed extents
 * become holes, the current reservation is trimmed or becomes one. */
static void
fill_discard(struct cache_fill *f)
{
    for (uint32_t i = 0; i < f->next; i++)
        cache_write_hole(f->c, f->ext[i].off, f->ext[i].rec_len);
    if (f->pinned && (f->shared || !cache_ring_trim(f->c, f->off, f->ext_len, 0)))
        cache_write_hole(f->c, f->off, f->ext_len);
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
    if (len > c->g.seg_size)
        len = c->g.seg_size;        /* a large object: this is its extent 0 */
    /* Key and header block go into extent 0 and again into the CHAIN
     * record of a large object: at most a quarter of a segment then. */
    if (body_len >= 0 && len == c->g.seg_size
        && cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen, 0) > c->g.seg_size / 4) {
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
    f->xskip = (uint32_t)(keylen + hdrlen);
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

/* Seal the current extent as EXTENT record number f->next (its tail given
 * back or marked as a hole) and add it to the table; it stays pinned. */
static int
fill_seal_extent(struct cache_fill *f)
{
    struct cache *c = f->c;
    struct cache_rec r;
    uint8_t *p = cache_ring_ptr(c, f->off);

    if (f->next == f->next_cap) {
        uint32_t cap = f->next_cap ? f->next_cap * 2 : 16;
        struct cache_ext *x = realloc(f->ext, cap * sizeof(*x));

        if (x == NULL)
            return CACHE_ERROR;
        f->ext = x;
        f->next_cap = cap;
    }
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_EXTENT;
    r.pad = (uint16_t)f->next;
    r.key_len = f->next == 0 ? f->key_len : 0;
    r.hdr_len = f->next == 0 ? f->hdr_len : 0;
    r.body_len = f->xbody;
    r.rec_len = (uint32_t)cache_rec_total(r.key_len, r.hdr_len, f->xbody);
    r.abs_off = f->off;
    r.stored = f->meta.stored;
    r.expires = f->meta.expires;
    memcpy(r.key_hash, f->hash, 16);
    r.body_sum = cache_hash64(p + CACHE_REC_SIZE + f->xskip, f->xbody, CACHE_BODY_SEED);
    cache_rec_seal(&r, p + CACHE_REC_SIZE, f->xskip);
    memcpy(p, &r, sizeof(r));
    if (f->ext_len > r.rec_len && !cache_ring_trim(c, f->off, f->ext_len, r.rec_len))
        cache_write_hole(c, f->off + r.rec_len, f->ext_len - r.rec_len);
    f->ext[f->next].off = f->off;
    f->ext[f->next].body_len = f->xbody;
    f->ext[f->next].body_sum = r.body_sum;
    f->ext[f->next].rec_len = r.rec_len;
    f->ext[f->next].skip = f->xskip;
    f->next++;
    f->pinned = 0;              /* the pin now belongs to ext[] */
    return CACHE_OK;
}

/* The current extent is full: seal it and reserve the next one (exactly
 * the rest when the length is known, else a whole segment). */
static int
fill_next_extent(struct cache_fill *f)
{
    struct cache *c = f->c;
    uint64_t len = c->g.seg_size, off;
    int rc;

    if (f->next + 1 >= CACHE_EXT_MAX
        || cache_rec_total(f->key_len, f->hdr_len, 0) > c->g.seg_size / 4)
        return CACHE_TOOBIG;
    if (f->want >= 0 && cache_rec_total(0, 0, (uint64_t)f->want - f->body_len) < len)
        len = cache_rec_total(0, 0, (uint64_t)f->want - f->body_len);
    if ((rc = fill_seal_extent(f)) != CACHE_OK)
        return rc;
    f->chain = 1;
    if ((rc = cache_reserve(c, len, &off)) != CACHE_OK)
        return rc;
    f->off = off;
    f->ext_len = len;
    f->seg = cache_seg_of(c->shm, off);
    f->pinned = 1;
    f->xbody = 0;
    f->xskip = 0;
    memset(cache_ring_ptr(c, off), 0, CACHE_REC_SIZE);
    return CACHE_OK;
}

/* Make room for more body bytes in the current extent: grow a first
 * extent of unknown length (in place or by moving it), else go on in a
 * new extent.  Returns CACHE_OK with room > 0, or an error. */
static int
fill_room(struct cache_fill *f, uint64_t want)
{
    struct cache *c = f->c;
    uint64_t need = cache_rec_total(f->xskip, 0, f->xbody + want);
    int rc;

    if (!f->chain && f->want < 0 && f->ext_len < c->g.seg_size) {
        uint64_t grow = f->ext_len * 2;

        if (grow > c->g.seg_size)
            grow = c->g.seg_size;
        if (grow < need && need <= c->g.seg_size)
            grow = need;
        if (cache_ring_extend(c, f->off, f->ext_len, grow) == CACHE_OK)
            f->ext_len = grow;
        else if ((rc = fill_relocate(f, grow)) != CACHE_OK)
            return rc;
        return CACHE_OK;
    }
    return fill_next_extent(f);
}

/*
 * See cache.h.
 */
int
cache_fill_write(struct cache_fill *f, const void *data, size_t len)
{
    const uint8_t *d = data;
    struct cache *c;
    uint64_t nb;
    int rc;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    if (f->state != FILL_OPEN)
        return CACHE_ABORTED;
    c = f->c;
    nb = f->body_len + len;
    if ((f->want >= 0 && nb > (uint64_t)f->want) || nb > c->max_doc)
        return fill_fail(f, CACHE_TOOBIG);
    while (len > 0) {
        uint64_t used = CACHE_REC_SIZE + f->xskip + f->xbody;
        uint64_t room = f->ext_len > used ? f->ext_len - used : 0;
        size_t n;

        if (room == 0) {
            if ((rc = fill_room(f, len)) != CACHE_OK)
                return fill_fail(f, rc);
            continue;
        }
        n = len < room ? len : (size_t)room;
        memcpy(cache_ring_ptr(c, f->off) + used, d, n);
        f->xbody += n;
        f->body_len += n;
        d += n;
        len -= n;
    }
    return CACHE_OK;
}

/* Write the CHAIN record of a large fill (every extent sealed) at the
 * head and read it back; *hoff, *hlen: where.  The head's own pin is
 * kept in f->seg. */
static int
fill_write_chain(struct cache_fill *f, struct cache_rec *r, uint64_t *hoff)
{
    struct cache *c = f->c;
    uint64_t tab = (uint64_t)f->next * CACHE_EXT_SIZE, len, off;
    const char *why = NULL;
    uint8_t *p;
    int rc;

    len = cache_rec_total(f->key_len, f->hdr_len, tab);
    if (len > c->g.seg_size)
        return CACHE_TOOBIG;
    if ((rc = cache_reserve(c, len, &off)) != CACHE_OK)
        return rc;
    f->off = off;
    f->ext_len = len;
    f->seg = cache_seg_of(c->shm, off);
    f->pinned = 1;
    p = cache_ring_ptr(c, off);
    memset(p, 0, CACHE_REC_SIZE);
    /* key and header block from extent 0 (pinned) */
    memcpy(p + CACHE_REC_SIZE, cache_ring_ptr(c, f->ext[0].off) + CACHE_REC_SIZE,
           (size_t)f->key_len + f->hdr_len);
    memcpy(p + CACHE_REC_SIZE + f->key_len + f->hdr_len, f->ext, tab);
    memset(r, 0, sizeof(*r));
    r->magic = CACHE_REC_MAGIC;
    r->version = CACHE_REC_VERSION;
    r->type = CACHE_REC_CHAIN;
    r->pad = (uint16_t)f->next;
    r->flags = f->meta.flags;
    r->status = f->meta.status;
    r->key_len = f->key_len;
    r->hdr_len = f->hdr_len;
    r->body_len = f->body_len;
    r->rec_len = (uint32_t)len;
    r->abs_off = off;
    r->stored = f->meta.stored;
    r->expires = f->meta.expires;
    memcpy(r->key_hash, f->hash, 16);
    r->body_sum = cache_hash64(f->ext, tab, CACHE_BODY_SEED);
    cache_rec_seal(r, p + CACHE_REC_SIZE, (size_t)f->key_len + f->hdr_len + tab);
    memcpy(p, r, sizeof(*r));
    if (cache_rec_check((const struct cache_rec *)p, off, c->g.seg_size - off % c->g.seg_size,
                        &why) < 0) {
        cache_log_error("cache: chain record failed its own check after writing: %s", why);
        memset(p, 0, CACHE_REC_SIZE);
        return CACHE_ERROR;
    }
    *hoff = off;
    return CACHE_OK;
}

/* A purge ran while this fill was open: what it stores may be what the
 * purge meant to remove, so its entry is stored stale (purge.c). */
static void
fill_purged_stale(const struct cache_fill *f, struct cache_ent *e)
{
    if (cache_purge_gen(f->c) != f->purge_gen && e->expires > (int64_t)time(NULL) - 1)
        e->expires = (int64_t)time(NULL) - 1;
}

/* Commit a large fill: seal the last extent, write the CHAIN record,
 * then the entry (off = CHAIN record, body_off = extent 0). */
static int
fill_commit_chain(struct cache_fill *f, int *replaced)
{
    struct cache *c = f->c;
    struct cache_rec r;
    struct cache_ent e;
    uint64_t hoff;
    int rc;

    if ((rc = fill_seal_extent(f)) != CACHE_OK)
        return rc;
    if (!cache_ring_alive(c->shm, f->ext[0].off))
        return CACHE_ABORTED;               /* lapped while filling */
    if ((rc = fill_write_chain(f, &r, &hoff)) != CACHE_OK)
        return rc;
    /* The reservation may have moved the head a lap past extent 0. */
    if (!cache_ring_alive(c->shm, f->ext[0].off)) {
        memset(cache_ring_ptr(c, hoff), 0, CACHE_REC_SIZE);
        return CACHE_ABORTED;
    }
    cache_ent_for_rec(c, &e, &r, hoff, f->ext[0].off);
    fill_purged_stale(f, &e);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_put(c, f->hash, &e, replaced);
    if (rc != CACHE_OK) {
        memset(cache_ring_ptr(c, hoff), 0, CACHE_REC_SIZE);
        return rc;
    }
    CTR_ADD(c, fills, 1);
    CTR_ADD(c, bytes_written, r.rec_len);
    for (uint32_t i = 0; i < f->next; i++)
        CTR_ADD(c, bytes_written, f->ext[i].rec_len);
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
    if (f->chain) {
        if ((rc = fill_commit_chain(f, replaced)) != CACHE_OK) {
            fill_fail(f, rc);
            fill_discard(f);
        }
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
    fill_purged_stale(f, &e);
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
    if (f->state == FILL_OPEN)
        CTR_ADD(f->c, fill_failures, 1);
    fill_discard(f);
    fill_release(f);
}

/* ------------------------------------------------------------------ */
/* Read-while-writer: see cache.h. */

uint32_t
cache_fill_where(struct cache_fill *f, uint64_t *hdr_off, uint32_t *hdr_len, uint64_t *off,
                 uint64_t *pos, uint32_t max)
{
    uint64_t p = 0, first;
    uint32_t n = 0;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    if (f->state != FILL_OPEN)
        return 0;
    f->shared = 1;
    first = f->next ? f->ext[0].off : f->off;
    *hdr_off = first + CACHE_REC_SIZE + f->key_len;
    *hdr_len = f->hdr_len;
    for (uint32_t i = 0; i < f->next; i++, n++) {
        if (n < max) {
            off[n] = f->ext[i].off + CACHE_REC_SIZE + f->ext[i].skip;
            pos[n] = p;
        }
        p += f->ext[i].body_len;
    }
    if (f->pinned) {
        if (n < max) {
            off[n] = f->off + CACHE_REC_SIZE + f->xskip;
            pos[n] = p;
        }
        n++;
    }
    return n;
}

uint64_t
cache_fill_written(const struct cache_fill *f)
{
    return f->state == FILL_OPEN ? f->body_len : 0;
}

const struct cache_meta *
cache_fill_meta(const struct cache_fill *f)
{
    assert(f && f->magic == CACHE_FILL_MAGIC);
    return &f->meta;
}

int
cache_off_pin(struct cache *c, uint64_t off)
{
    uint32_t seg = cache_seg_of(c->shm, off);

    cache_pin(c, seg);
    if (!cache_ring_alive(c->shm, off)) {
        cache_unpin(c, seg);
        return -1;
    }
    return 0;
}

void
cache_off_unpin(struct cache *c, uint64_t off)
{
    cache_unpin(c, cache_seg_of(c->shm, off));
}

const void *
cache_off_ptr(struct cache *c, uint64_t off)
{
    return cache_ring_ptr(c, off);
}
