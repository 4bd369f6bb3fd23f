/*
 * cache/ring.c: the shared area, the segment ring's control words, pins.
 *
 * Shared area (laid out by the master before fork, see FORMAT.md):
 *     struct cache_shm                 control words, robust mutex
 *     struct cache_counters [nslots]   one per process slot
 *     uint64_t pins[nslots][pin_words] one bit per segment per slot
 *     uint8_t freq[freq_mask + 1]      hit counters for S3-FIFO eviction
 *
 * Ring.  Content space is nseg segments of seg_size bytes.  Positions are
 * absolute 64-bit byte counts that only grow; absolute segment number
 * A = off / seg_size lives in slot A % nseg.  cur_seg is the absolute
 * segment the writers are filling and head the next free byte in it
 * (cur_seg * seg_size <= head <= (cur_seg + 1) * seg_size).  A record at
 * off is alive while  off / seg_size + nseg > cur_seg  (the writers have
 * not re-entered its slot) and off >= floor (not evicted for index space).
 * Records never span segments.
 *
 * Allocation runs under alloc_mx, a process-shared robust mutex; the
 * critical section is a handful of loads and stores, plus a scan of one
 * bitmap word per slot when a new segment is entered.  If its holder dies,
 * the next locker marks the current segment full, so the next reservation
 * enters a fresh segment with the full pin check (the dead holder may have
 * been between entering a segment and checking its pins).
 *
 * Pins.  A reader (or a fill) sets its slot's bit for the segment before
 * using bytes in it; the process keeps the real count privately and
 * touches the shared bit only on 0<->1.  Entering a segment is Dekker's
 * protocol with seq_cst atomics on both sides:
 *     writer: store cur_seg = A;  load every slot's bit for A % nseg
 *     reader: set own bit;        load cur_seg, check the record is alive
 * Either the writer sees the bit (and skips the segment: it stays
 * physically untouched for this lap, its old records count as evicted) or
 * the reader sees the new cur_seg (and calls it a miss).  Writers skip,
 * never wait: a slow client holding a pin costs one segment of capacity per
 * lap, never a stalled worker.  Only the owner writes its bitmap; the
 * master clears a dead slot's bitmap before the slot is reused.
 *
 * Eviction.  A reservation that enters segment A says so (*entered); the
 * writer then (lock dropped) prepares A + 1: evict.c rewrites its hot
 * records at the head (FORMAT.md, "Eviction").  This file never calls
 * eviction.  The frequency counters it reads live here.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "cache/cache-int.h"

#define ALIGN64(x) (((x) + 63u) & ~(size_t)63u)

int
cache_geom_compute(const struct cache_conf *cf, struct cache_geom *g)
{
    uint64_t map, content, seg;

    if (cf == NULL || cf->size <= 0)
        return -1;
    if (cf->index_mapsize) {
        map = (cf->index_mapsize + 4095u) & ~(uint64_t)4095u;
        if (map < 32u << 10)
            map = 32u << 10;
    } else {
        map = (uint64_t)cf->size / 32;
        if (map < CACHE_MAP_MIN)
            map = CACHE_MAP_MIN;
        map = (map + 65535u) & ~(uint64_t)65535u;
    }
    if ((uint64_t)cf->size <= map + CACHE_HDR_SIZE)
        return -1;
    content = (uint64_t)cf->size - map - CACHE_HDR_SIZE;
    /* At least 8 segments when the store allows: fewer make eviction too
     * coarse (each lap drops 1/nseg of the cache at once). */
    seg = CACHE_SEG_MAX;
    while (seg > CACHE_SEG_MIN && content / seg < 8)
        seg /= 2;
    if (content / seg < CACHE_NSEG_MIN || content / seg > UINT32_MAX)
        return -1;
    g->seg_size = seg;
    g->nseg = (uint32_t)(content / seg);
    g->file_size = CACHE_HDR_SIZE + (uint64_t)g->nseg * seg;
    g->mapsize = (size_t)map;
    return 0;
}

/* Counters in the frequency table for geometry g: one per CACHE_FREQ_PER
 * bytes of content (the index is sized for ~4 KiB objects too), a power
 * of two between CACHE_FREQ_MIN and CACHE_FREQ_CAP.  Past the cap (stores
 * over 128 GiB) several keys share a counter: a cold object then looks
 * hot now and then, which costs some relocation budget, never
 * correctness. */
static uint64_t
freq_entries(const struct cache_geom *g)
{
    uint64_t want = (uint64_t)g->nseg * g->seg_size / CACHE_FREQ_PER, n = CACHE_FREQ_MIN;

    while (n < want && n < CACHE_FREQ_CAP)
        n *= 2;
    return n;
}

static size_t
shm_layout(const struct cache_geom *g, int nslots, size_t *counters_off, size_t *pins_off,
           uint32_t *pin_words, size_t *freq_off)
{
    size_t off = ALIGN64(sizeof(struct cache_shm));
    *pin_words = (g->nseg + 63) / 64;
    *counters_off = off;
    off += (size_t)nslots * sizeof(struct cache_counters);
    *pins_off = off;
    off += (size_t)nslots * *pin_words * sizeof(uint64_t);
    off = ALIGN64(off);
    *freq_off = off;
    off += (size_t)freq_entries(g);
    return ALIGN64(off);
}

/*
 * See cache.h.
 */
size_t
cache_shm_size(const struct cache_conf *cf, int nslots)
{
    struct cache_geom g;
    size_t co, po, fo;
    uint32_t pw;

    if (nslots <= 0 || cache_geom_compute(cf, &g) < 0)
        return 0;
    return shm_layout(&g, nslots, &co, &po, &pw, &fo);
}

/*
 * See cache.h.
 */
int
cache_shm_init(void *area, size_t len, const struct cache_conf *cf, int nslots)
{
    struct cache_geom g;
    struct cache_shm *s = area;
    pthread_mutexattr_t ma;
    size_t co, po, fo, need;
    uint32_t pw;

    if (area == NULL || (uintptr_t)area % _Alignof(struct cache_shm) != 0
        || nslots <= 0 || cache_geom_compute(cf, &g) < 0
        || (cf->eviction != CACHE_EVICT_S3FIFO && cf->eviction != CACHE_EVICT_FIFO))
        return CACHE_INVAL;
    need = shm_layout(&g, nslots, &co, &po, &pw, &fo);
    if (len < need)
        return CACHE_INVAL;
    memset(area, 0, need);
    s->nslots = (uint32_t)nslots;
    s->nseg = g.nseg;
    s->seg_size = g.seg_size;
    s->len = need;
    s->pin_words = pw;
    s->counters_off = co;
    s->pins_off = po;
    s->freq_off = fo;
    s->freq_mask = freq_entries(&g) - 1;
    s->eviction = (uint32_t)cf->eviction;
    if (pthread_mutexattr_init(&ma) != 0)
        return CACHE_ERROR;
    if (pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED) != 0
        || pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST) != 0
        || pthread_mutex_init(&s->alloc_mx, &ma) != 0) {
        pthread_mutexattr_destroy(&ma);
        return CACHE_ERROR;
    }
    pthread_mutexattr_destroy(&ma);
    s->version = CACHE_SHM_VERSION;
    __atomic_store_n(&s->magic, CACHE_SHM_MAGIC, __ATOMIC_RELEASE);
    return CACHE_OK;
}

/* The validated control block of area (64-byte aligned), or NULL. */
struct cache_shm *
cache_shm_get(void *area)
{
    struct cache_shm *s = area;

    if (s == NULL || (uintptr_t)area % _Alignof(struct cache_shm) != 0)
        return NULL;
    if (__atomic_load_n(&s->magic, __ATOMIC_ACQUIRE) != CACHE_SHM_MAGIC
        || s->version != CACHE_SHM_VERSION || s->nslots == 0 || s->nseg == 0
        || s->pin_words != (s->nseg + 63) / 64 || (s->freq_mask & (s->freq_mask + 1)) != 0
        || s->freq_off + s->freq_mask + 1 > s->len)
        return NULL;
    return s;
}

uint64_t *
cache_slot_pins(struct cache_shm *s, int slot)
{
    assert(slot >= 0 && (uint32_t)slot < s->nslots);
    return (uint64_t *)((uint8_t *)s + s->pins_off) + (size_t)slot * s->pin_words;
}

struct cache_counters *
cache_slot_counters(struct cache_shm *s, int slot)
{
    assert(slot >= 0 && (uint32_t)slot < s->nslots);
    return (struct cache_counters *)((uint8_t *)s + s->counters_off) + slot;
}

/* Lock the ring; recover the control words if the last holder died.
 * Returns 0 or -1 (mutex unusable). */
int
cache_ring_lock(struct cache_shm *s)
{
    int rc = pthread_mutex_lock(&s->alloc_mx);

    if (rc == EOWNERDEAD) {
        uint64_t cur = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->head, (cur + 1) * s->seg_size, __ATOMIC_SEQ_CST);
        pthread_mutex_consistent(&s->alloc_mx);
        cache_log_warn("cache: a process died holding the ring lock; "
                       "skipping to a fresh segment");
        return 0;
    }
    return rc == 0 ? 0 : -1;
}

void
cache_ring_unlock(struct cache_shm *s)
{
    int rc = pthread_mutex_unlock(&s->alloc_mx);
    assert(rc == 0);
    (void)rc;
}

static int
seg_pinned(struct cache_shm *s, uint32_t seg)
{
    uint64_t bit = 1ull << (seg % 64);
    for (uint32_t i = 0; i < s->nslots; i++) {
        uint64_t *w = cache_slot_pins(s, (int)i) + seg / 64;
        if (__atomic_load_n(w, __ATOMIC_SEQ_CST) & bit)
            return 1;
    }
    return 0;
}

void
cache_pin(struct cache *c, uint32_t seg)
{
    assert(seg < c->g.nseg);
    if (c->pincount[seg]++ == 0)
        __atomic_fetch_or(&c->mypins[seg / 64], 1ull << (seg % 64), __ATOMIC_SEQ_CST);
}

void
cache_unpin(struct cache *c, uint32_t seg)
{
    assert(seg < c->g.nseg && c->pincount[seg] > 0);
    if (--c->pincount[seg] == 0)
        __atomic_fetch_and(&c->mypins[seg / 64], ~(1ull << (seg % 64)),
                           __ATOMIC_SEQ_CST);
}

/* Is a record at absolute offset off still in the ring and not evicted? */
int
cache_ring_alive(const struct cache_shm *s, uint64_t off)
{
    uint64_t cur = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST);
    uint64_t a = off / s->seg_size;

    return a <= cur && a + s->nseg > cur
           && off >= __atomic_load_n(&s->floor, __ATOMIC_SEQ_CST);
}

/*
 * Reserve len bytes (len <= seg_size) at the head; the segment holding
 * them is pinned for the caller (cache_unpin() when done).  Returns
 * CACHE_OK with *off set, and *entered = 1 when the head entered a new
 * segment for it (else 0); CACHE_FULL when every segment is pinned,
 * CACHE_TOOBIG, CACHE_ERROR.
 */
int
cache_ring_reserve(struct cache *c, uint64_t len, uint64_t *off, int *entered)
{
    struct cache_shm *s = c->shm;
    uint64_t cur, h;

    if (len > s->seg_size || len == 0)
        return CACHE_TOOBIG;
    if (cache_ring_lock(s) < 0)
        return CACHE_ERROR;
    cur = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST);
    h = __atomic_load_n(&s->head, __ATOMIC_SEQ_CST);
    assert(h >= cur * s->seg_size && h <= (cur + 1) * s->seg_size);
    if (h + len <= (cur + 1) * s->seg_size) {
        __atomic_store_n(&s->head, h + len, __ATOMIC_SEQ_CST);
        *off = h;
        *entered = 0;
        cache_pin(c, cache_seg_of(s, h));
        cache_ring_unlock(s);
        return CACHE_OK;
    }
    for (uint32_t i = 1; i <= s->nseg; i++) {
        uint64_t a = cur + i;
        uint32_t seg = (uint32_t)(a % s->nseg);

        /* Full segment first, so a holder dying right here leaves head
         * consistent with cur_seg. */
        __atomic_store_n(&s->head, a * s->seg_size, __ATOMIC_SEQ_CST);
        __atomic_store_n(&s->cur_seg, a, __ATOMIC_SEQ_CST);
        if (seg_pinned(s, seg)) {
            __atomic_store_n(&s->head, (a + 1) * s->seg_size, __ATOMIC_SEQ_CST);
            continue;
        }
        cache_pin(c, seg);
        __atomic_store_n(&s->head, a * s->seg_size + len, __ATOMIC_SEQ_CST);
        *off = a * s->seg_size;
        *entered = 1;
        cache_ring_unlock(s);
        return CACHE_OK;
    }
    cache_ring_unlock(s);
    return CACHE_FULL;
}

/*
 * Grow the reservation [off, off + old_len) in place to new_len bytes.
 * Possible only while nobody reserved after it and the segment has room.
 * Returns CACHE_OK or CACHE_FULL (caller relocates).
 */
int
cache_ring_extend(struct cache *c, uint64_t off, uint64_t old_len, uint64_t new_len)
{
    struct cache_shm *s = c->shm;
    int rc = CACHE_FULL;

    if (cache_ring_lock(s) < 0)
        return CACHE_ERROR;
    if (__atomic_load_n(&s->head, __ATOMIC_SEQ_CST) == off + old_len
        && off / s->seg_size == __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST)
        && off % s->seg_size + new_len <= s->seg_size) {
        __atomic_store_n(&s->head, off + new_len, __ATOMIC_SEQ_CST);
        rc = CACHE_OK;
    }
    cache_ring_unlock(s);
    return rc;
}

/*
 * Give back the tail of a reservation when it is the last one at the
 * head.  Returns 1 when given back, 0 when someone reserved after it (the
 * caller then marks the tail as a hole, see fill.c).
 */
int
cache_ring_trim(struct cache *c, uint64_t off, uint64_t old_len, uint64_t new_len)
{
    struct cache_shm *s = c->shm;
    int done = 0;

    assert(new_len <= old_len);
    if (cache_ring_lock(s) < 0)
        return 0;
    if (__atomic_load_n(&s->head, __ATOMIC_SEQ_CST) == off + old_len
        && off / s->seg_size == __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST)) {
        __atomic_store_n(&s->head, off + new_len, __ATOMIC_SEQ_CST);
        done = 1;
    }
    cache_ring_unlock(s);
    return done;
}

/* ------------------------------------------------------------------ */
/* Frequency counters (S3-FIFO).  One byte per hashed key in shm: a 2-bit
 * count and a 6-bit tag (other bits of the key hash than the ones that
 * chose the byte).  The tag keeps two keys sharing a byte apart: a cold
 * key does not read a hot key's count (so is not relocated for it), and
 * relocating it does not decay the hot key's count.  When a hit on another
 * key lands on a counted byte, the owner ages by one and the byte changes
 * hands at 0 (the more popular key keeps it).  Touched with relaxed loads
 * and stores only: two processes bumping at once may lose one bump, which
 * an approximate popularity count can afford, and a saturated counter is
 * only read, so a hot object's line is not bounced between CPUs by its
 * hits. */

#define FREQ_TAG(h)   ((uint8_t)(((h) >> 58) << 2))     /* high 6 bits */
#define FREQ_CNT      3u

static uint8_t *
freq_slot(const struct cache *c, const uint8_t hash[16], uint8_t *tag)
{
    uint64_t h;

    memcpy(&h, hash + 8, sizeof(h));
    *tag = FREQ_TAG(h);
    return (uint8_t *)c->shm + c->shm->freq_off + (h & c->shm->freq_mask);
}

uint32_t
cache_freq_get(const struct cache *c, const uint8_t hash[16])
{
    uint8_t tag, v = __atomic_load_n(freq_slot(c, hash, &tag), __ATOMIC_RELAXED);

    return (v & ~FREQ_CNT) == tag ? v & FREQ_CNT : 0;
}

/* A hit: one more, up to CACHE_FREQ_MAX. */
void
cache_freq_bump(const struct cache *c, const uint8_t hash[16])
{
    uint8_t tag, *p = freq_slot(c, hash, &tag), v = __atomic_load_n(p, __ATOMIC_RELAXED);
    uint8_t n;

    if ((v & ~FREQ_CNT) == tag)
        n = (v & FREQ_CNT) < CACHE_FREQ_MAX ? (uint8_t)(v + 1) : v;
    else if ((v & FREQ_CNT) > 1)
        n = (uint8_t)(v - 1);           /* another key's: it ages */
    else
        n = (uint8_t)(tag | 1);         /* free (or nearly): ours now */
    if (n != v)
        __atomic_store_n(p, n, __ATOMIC_RELAXED);
}

/* A lap survived: one less.  Returns the count before. */
uint32_t
cache_freq_decay(const struct cache *c, const uint8_t hash[16])
{
    uint8_t tag, *p = freq_slot(c, hash, &tag), v = __atomic_load_n(p, __ATOMIC_RELAXED);

    if ((v & ~FREQ_CNT) != tag)
        return 0;
    if (v & FREQ_CNT)
        __atomic_store_n(p, (uint8_t)(v - 1), __ATOMIC_RELAXED);
    return v & FREQ_CNT;
}

void
cache_freq_clear(const struct cache *c, const uint8_t hash[16])
{
    uint8_t tag, *p = freq_slot(c, hash, &tag), v = __atomic_load_n(p, __ATOMIC_RELAXED);

    if ((v & ~FREQ_CNT) == tag && (v & FREQ_CNT))
        __atomic_store_n(p, tag, __ATOMIC_RELAXED);
}

/*
 * See cache.h.  The dead process's private pin counts died with it; its
 * shared bits are all there is to clear.
 */
void
cache_slot_reset(void *shm_area, int slot)
{
    struct cache_shm *s = cache_shm_get(shm_area);
    struct cache_counters *ctr;
    uint64_t *pins, *src, *dst;

    if (s == NULL || slot < 0 || (uint32_t)slot >= s->nslots)
        return;
    pins = cache_slot_pins(s, slot);
    for (uint32_t i = 0; i < s->pin_words; i++)
        __atomic_store_n(&pins[i], 0, __ATOMIC_SEQ_CST);
    ctr = cache_slot_counters(s, slot);
    src = (uint64_t *)ctr;
    dst = (uint64_t *)&s->retired;
    for (int i = 0; i < CACHE_NCOUNTERS; i++) {
        __atomic_store_n(&dst[i], dst[i] + __atomic_load_n(&src[i], __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&src[i], 0, __ATOMIC_RELAXED);
    }
}

/*
 * See cache.h.
 */
void
cache_stats_sum(const void *shm_area, struct cache_stats *out)
{
    struct cache_shm *s = cache_shm_get((void *)(uintptr_t)shm_area);
    uint64_t *o = (uint64_t *)&out->c;
    uint64_t cur, head, lo, fl;

    memset(out, 0, sizeof(*out));
    if (s == NULL)
        return;
    for (uint32_t slot = 0; slot <= s->nslots; slot++) {
        const uint64_t *src = slot == s->nslots ? (const uint64_t *)&s->retired
                              : (const uint64_t *)cache_slot_counters(s, (int)slot);
        for (int i = 0; i < CACHE_NCOUNTERS; i++)
            o[i] += __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    }
    cur = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST);
    head = __atomic_load_n(&s->head, __ATOMIC_SEQ_CST);
    fl = __atomic_load_n(&s->floor, __ATOMIC_SEQ_CST);
    lo = cur + 1 > s->nseg ? (cur + 1 - s->nseg) * s->seg_size : 0;
    if (fl > lo)
        lo = fl;
    out->segments = s->nseg;
    out->segment_size = s->seg_size;
    out->store_bytes = (uint64_t)s->nseg * s->seg_size;
    out->store_bytes_used = head > lo ? head - lo : 0;
}
