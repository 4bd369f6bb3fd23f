/*
 * t/fuzz/fuzz_record.c: records read back from a corrupted segment.
 *
 * A fake store of two 4 KiB segments (the real code paths do not depend
 * on the segment size) is filled from the input, then read the two ways
 * the cache reads it: a scan (cache_rec_check at every aligned offset,
 * as an index rebuild would) and a hit (cache_ent_verify with an index
 * entry taken from the input, as cache_lookup does).
 *
 * Input: byte 0 = flags, then a struct cache_ent, then the ring bytes.
 * Checksums would stop a fuzzer at the first field, so flags let it ask
 * for help: F_SEAL recomputes head_sum / body_sum of every record-looking
 * header whose covered bytes fit its segment, F_PLACE sets their abs_off
 * to where they sit, F_ENT points the entry at lap 0 and copies the
 * lengths of the record it names, F_HASH / F_KEY pass that record's hash
 * and key.  Everything else stays hostile.
 * Invariants: a record that passes cache_rec_check lies inside its
 * segment with its key, header block, link and body inside rec_len; a
 * verified entry hands out a header block and a body that lie inside
 * their records and segments (the bytes a hit writes to the socket).
 * ASan alone cannot see these: both segments are one allocation.
 */
#include "config.h"
#include "cache/cache-int.h"
#include "t/fuzz/fuzz.h"

#define SEG   4096u
#define NSEG  2u
#define RING  (SEG * NSEG)

enum { F_SEAL = 1, F_PLACE = 2, F_ENT = 4, F_HASH = 8, F_KEY = 16, F_SUM = 32 };

static void
seal_all(uint8_t *ring, unsigned flags)
{
    for (uint64_t abs = 0; abs + CACHE_REC_SIZE <= RING; abs += CACHE_REC_ALIGN) {
        struct cache_rec *r = (struct cache_rec *)(ring + abs);
        uint64_t room = SEG - abs % SEG;

        if (r->magic != CACHE_REC_MAGIC || room < CACHE_REC_SIZE)
            continue;
        if (flags & F_PLACE)
            r->abs_off = abs;
        uint64_t tail = (uint64_t)r->key_len + r->hdr_len
                        + (r->type == CACHE_REC_HEADERS ? CACHE_LINK_SIZE : 0);
        if (r->type == CACHE_REC_OBJECT && r->body_len <= room
            && CACHE_REC_SIZE + (uint64_t)r->key_len + r->hdr_len + r->body_len <= room)
            r->body_sum = cache_hash64((uint8_t *)(r + 1) + r->key_len + r->hdr_len,
                                       r->body_len, CACHE_BODY_SEED);
        if (CACHE_REC_SIZE + tail <= room)
            cache_rec_seal(r, (uint8_t *)(r + 1), tail);
    }
}

/* [p, p+n) inside the segment that starts at seg? */
static int
inside(const uint8_t *seg, const void *p, uint64_t n)
{
    const uint8_t *b = p;
    return b >= seg && b <= seg + SEG && n <= (uint64_t)(seg + SEG - b);
}

static void
scan(uint8_t *ring)
{
    for (uint64_t abs = 0; abs < RING; abs += CACHE_REC_ALIGN) {
        const struct cache_rec *r = (const struct cache_rec *)(ring + abs);
        const uint8_t *seg = ring + abs / SEG * SEG;
        uint64_t room = SEG - abs % SEG;
        const char *why = NULL;

        if (room < CACHE_REC_SIZE) {
            /* the checker must refuse without reading the header */
            FZ_CHECK(cache_rec_check(r, abs, room, &why) == -1 && why);
            continue;
        }
        if (cache_rec_check(r, abs, room, &why) != 0) {
            FZ_CHECK(why != NULL);
            continue;
        }
        FZ_CHECK(r->rec_len <= room && r->rec_len >= CACHE_REC_SIZE);
        FZ_CHECK(inside(seg, r, r->rec_len));
        uint64_t used = CACHE_REC_SIZE + (uint64_t)r->key_len + r->hdr_len;
        FZ_CHECK(used <= r->rec_len);
        if (r->type == CACHE_REC_OBJECT || r->type == CACHE_REC_VARIANTS)
            FZ_CHECK(used + r->body_len <= r->rec_len);
        if (r->type == CACHE_REC_HEADERS) {
            struct cache_rec_link l;
            FZ_CHECK(used + CACHE_LINK_SIZE <= r->rec_len);
            cache_rec_link_get(r, &l);
            FZ_CHECK(l.body_off < abs);
        }
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t *ring;
    static struct cache_shm shm;
    static struct cache c;
    struct cache_ent e;

    if (ring == NULL) {
        ring = aligned_alloc(64, RING);
        shm.seg_size = SEG;
        shm.nseg = NSEG;
        c.g.seg_size = SEG;
        c.g.nseg = NSEG;
        c.ring = ring;
        c.shm = &shm;
    }
    if (size < 1 + sizeof(e))
        return 0;
    unsigned flags = data[0];
    memcpy(&e, data + 1, sizeof(e));
    size_t n = size - 1 - sizeof(e);
    if (n > RING)
        n = RING;
    memset(ring, 0, RING);
    memcpy(ring, data + 1 + sizeof(e), n);

    if (flags & F_SEAL)
        seal_all(ring, flags);
    scan(ring);

    /* the hit path */
    if (flags & F_ENT) {
        e.magic = CACHE_ENT_MAGIC;
        e.version = CACHE_ENT_VERSION;
        e.off = e.off % RING / CACHE_REC_ALIGN * CACHE_REC_ALIGN;
        e.body_off = e.body_off % RING / CACHE_REC_ALIGN * CACHE_REC_ALIGN;
        const struct cache_rec *r = (const struct cache_rec *)(ring + e.off);
        if (e.off % SEG + CACHE_REC_SIZE <= SEG) {
            e.rec_len = r->rec_len;
            e.hdr_len = r->hdr_len;
            e.key_len = r->key_len;
            e.body_len = r->body_len;
        }
    }
    if (!cache_ent_valid(&e))
        return 0;
    uint8_t hash[16] = { 0 };
    const char *key = NULL;
    size_t keylen = 0;
    uint64_t so = e.off % SEG;
    const uint8_t *at = ring + (e.off / SEG % NSEG) * SEG + so;
    if (so % CACHE_REC_ALIGN == 0 && so + CACHE_REC_SIZE <= SEG) {
        const struct cache_rec *r = (const struct cache_rec *)at;
        if (flags & F_HASH)
            memcpy(hash, r->key_hash, 16);
        if ((flags & F_KEY) && so + CACHE_REC_SIZE + (uint64_t)r->key_len <= SEG) {
            key = (const char *)(r + 1);
            keylen = r->key_len;
        }
    }
    const struct cache_rec *h = NULL, *b = NULL;
    if (cache_ent_verify(&c, &e, hash, key, keylen, (flags & F_SUM) != 0, &h, &b) != 0)
        return 0;
    FZ_CHECK(h != NULL && b != NULL);
    const uint8_t *hseg = ring + ((const uint8_t *)h - ring) / SEG * SEG;
    const uint8_t *bseg = ring + ((const uint8_t *)b - ring) / SEG * SEG;
    /* exactly what cache_lookup hands to writev */
    const uint8_t *hdr = (const uint8_t *)(h + 1) + h->key_len;
    const uint8_t *body = (const uint8_t *)(b + 1) + b->key_len + b->hdr_len;
    FZ_CHECK(inside(hseg, h, h->rec_len));
    FZ_CHECK(inside(hseg, hdr, h->hdr_len));
    FZ_CHECK(inside(bseg, b, b->rec_len));
    FZ_CHECK(inside(bseg, body, b->body_len));
    FZ_CHECK(body + b->body_len <= (const uint8_t *)b + b->rec_len);
    FZ_CHECK(b->type == CACHE_REC_OBJECT);
    FZ_CHECK(b->body_len == e.body_len);
    return 0;
}
