/*
 * cache/record.c: hashing, checksums and the object record format.
 *
 * A record is self-describing: struct cache_rec, then the full cache key,
 * then the stored response header block, then the body, padded to
 * CACHE_REC_ALIGN.  A HEADERS record (a header refresh after a 304) has a
 * struct cache_rec_link in place of the body, naming the older OBJECT
 * record whose body it serves; its body_len and body_sum are that body's.
 * An object larger than what a segment holds is several EXTENT records
 * (pieces of the body, each inside one segment) and a CHAIN record written
 * last: key, header block and the table of extents (struct cache_ext).
 * Two checksums guard a record:
 *   head_sum  covers the fixed header, the key and the header block.  It is
 *             verified on every hit: a few hundred bytes, cheap, and it
 *             catches a scribbled or overwritten record before any of its
 *             fields is trusted.
 *   body_sum  covers the body.  Verifying it costs a pass over the body
 *             (about 0.1 ms per MiB), so a hit checks it only when the
 *             entry predates an unclean shutdown or in verify (debug) mode.
 * abs_off (the absolute ring offset the record was written at) ties the
 * record to its place and lap: a stale index entry pointing at a slot that
 * has since been rewritten finds another abs_off (or another key) there.
 *
 * The hash is ours: two 64-bit lanes, each absorbing 8 bytes per step
 * through a 64x64->128 multiply folded back to 64 bits (xor of halves),
 * combined at the end with the length.  It is not cryptographic; the key
 * hash is seeded per store (see store.c) so that colliding keys cannot be
 * computed offline, and a collision costs only a miss: the record carries
 * the full key and a hit compares it.
 */
#include "config.h"

#include <assert.h>
#include <string.h>

#include "cache/cache-int.h"

#define K0 0x9e3779b97f4a7c15ull
#define K1 0xd1b54a32d192ed03ull
#define K2 0xa0761d6478bd642full
#define K3 0xe7037ed1a0b428dbull

static inline uint64_t
fold(uint64_t a, uint64_t b)
{
    unsigned __int128 p = (unsigned __int128)a * b;
    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

static inline uint64_t
ld64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t
cache_hash64(const void *p, size_t n, uint64_t seed)
{
    const uint8_t *s = p;
    uint64_t a = seed ^ K0, b = (seed + K1) ^ K2;
    size_t left = n;

    /* Each lane mixes in its previous state with the constant multiplier,
     * so a data word can cancel the state only by equalling it exactly;
     * with a per-store seed an outsider cannot aim for that. */
    while (left >= 16) {
        a = fold(a ^ ld64(s), K2) + K1;
        b = fold(b ^ ld64(s + 8), K3) + K0;
        s += 16;
        left -= 16;
    }
    if (left) {
        uint8_t tail[16] = { 0 };
        memcpy(tail, s, left);
        a = fold(a ^ ld64(tail), K2) + K1;
        b = fold(b ^ ld64(tail + 8), K3) + K0;
    }
    return fold(a ^ (uint64_t)n, b ^ K1) ^ fold(b ^ K3, a + K0);
}

uint64_t
cache_rec_total(uint32_t key_len, uint32_t hdr_len, uint64_t body_len)
{
    uint64_t t = CACHE_REC_SIZE + (uint64_t)key_len + hdr_len + body_len;
    return (t + CACHE_REC_ALIGN - 1) & ~(uint64_t)(CACHE_REC_ALIGN - 1);
}

static uint64_t
rec_head_sum(const struct cache_rec *r, const uint8_t *tail, size_t taillen)
{
    struct cache_rec tmp = *r;
    tmp.head_sum = 0;
    return cache_hash64(tail, taillen, cache_hash64(&tmp, sizeof(tmp), K3));
}

/*
 * Fill in head_sum of r, whose key and header block (tail, taillen bytes;
 * for a HEADERS record the link too, see cache_rec_sumlen) follow it.
 * Every other field must be final, body_sum included.
 */
void
cache_rec_seal(struct cache_rec *r, const uint8_t *tail, size_t taillen)
{
    r->head_sum = rec_head_sum(r, tail, taillen);
}

/*
 * Validate the record at r, which the caller found at absolute offset
 * abs_off with `room` readable bytes from r to the end of its segment.
 * Checks magic, version, type, place (abs_off), lengths against each other
 * and against room, then head_sum.  Does not check body_sum.  Returns 0,
 * or -1 with *why set to a static reason.
 */
int
cache_rec_check(const struct cache_rec *r, uint64_t abs_off, uint64_t room,
                const char *why[1])
{
    if (room < CACHE_REC_SIZE) {
        *why = "no room for a record header";
        return -1;
    }
    if (r->magic != CACHE_REC_MAGIC) {
        *why = "bad record magic";
        return -1;
    }
    if (r->version != CACHE_REC_VERSION) {
        *why = "record version";
        return -1;
    }
    if (r->abs_off != abs_off) {
        *why = "record from another lap or place";
        return -1;
    }
    if (r->rec_len > room || r->rec_len % CACHE_REC_ALIGN != 0
        || r->rec_len < CACHE_REC_SIZE) {
        *why = "bad record length";
        return -1;
    }
    switch (r->type) {
    case CACHE_REC_HEADERS: {
        /* Lengths first: the link is read only once it is inside room. */
        struct cache_rec_link l;

        if (cache_rec_total(r->key_len, r->hdr_len, CACHE_LINK_SIZE) != r->rec_len) {
            *why = "record lengths disagree";
            return -1;
        }
        cache_rec_link_get(r, &l);
        if (l.body_off >= abs_off || l.body_off % CACHE_REC_ALIGN != 0
            || l.body_rec_len % CACHE_REC_ALIGN != 0
            || l.body_rec_len < CACHE_REC_SIZE
            || r->body_len > l.body_rec_len - CACHE_REC_SIZE) {
            *why = "bad body link";
            return -1;
        }
        break;
    }
    case CACHE_REC_CHAIN:
        if (r->pad == 0 || r->body_len == 0
            || cache_rec_total(r->key_len, r->hdr_len, (uint64_t)r->pad * CACHE_EXT_SIZE)
               != r->rec_len) {
            *why = "record lengths disagree";
            return -1;
        }
        break;
    case CACHE_REC_OBJECT:
    case CACHE_REC_VARIANTS:
    case CACHE_REC_EXTENT:
        if (r->body_len > room
            || cache_rec_total(r->key_len, r->hdr_len, r->body_len) != r->rec_len) {
            *why = "record lengths disagree";
            return -1;
        }
        break;
    case CACHE_REC_HOLE:
        if (r->key_len != 0 || r->hdr_len != 0) {
            *why = "bad hole record";
            return -1;
        }
        break;
    default:
        *why = "unknown record type";
        return -1;
    }
    if (rec_head_sum(r, (const uint8_t *)(r + 1), cache_rec_sumlen(r)) != r->head_sum) {
        *why = "record header checksum";
        return -1;
    }
    return 0;
}

uint64_t
cache_store_hdr_sum(const struct cache_store_hdr *h)
{
    return cache_hash64(h, offsetof(struct cache_store_hdr, hsum), K0);
}
