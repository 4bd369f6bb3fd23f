/*
 * shm/urltop.h: the busiest URLs, per process slot (issue 25: `ctl top`'s
 * URL rows, `ctl url top`, the "hits" of `ctl cache lookup`).
 *
 * A bounded heavy-hitter table in every slot (struct shm_slot's `urls`),
 * written only by the worker in that slot, with plain stores, like the
 * slot's counters.  It counts the requests that had a cache key, keyed by
 * 64 bits of the key's hash, and keeps the URL the client asked for (host
 * and target, cut to URLTOP_URL - 1 bytes) as the entry's label.
 *
 * The algorithm is space-saving (Metwally et al.) over small sets instead
 * of the whole table: a key's hash picks one set of URLTOP_WAYS entries;
 * a key found there counts one more; a key not there takes the set's
 * least-counted entry and starts at that entry's count plus one, the
 * count it inherits being its `err` (so requests - err <= the key's true
 * requests <= requests).  Hits and misses count from the entry's taking
 * (exact while the key keeps its entry).  The bound, space-saving's: a
 * set's least count is at most its requests / URLTOP_WAYS, so a key with
 * more than a quarter of its set's requests (about 1/256 of all, hashes
 * spreading keys evenly) is never displaced; a long tail shares the
 * least-counted entries, whose err grows with it.  Cost per request: the set's address
 * and up to URLTOP_WAYS compares; a take (a key new to its set) writes
 * the label too.
 *
 * Readers (the master for `ctl url top`, any worker for `cache lookup`)
 * copy entries while the writer runs.  A take brackets its writes with the
 * entry's `ver` (odd while it writes, release and acquire orders only: no
 * atomic read-modify-write), and a reader skips an entry that changed
 * under it; counts are single aligned 64-bit words, read slightly stale.
 *
 * When the master reaps a process it merges the slot's table into the
 * header's (shm_slot_retire): per set, the entries of both with equal
 * hashes add up, and the URLTOP_WAYS busiest stay.  So figures are since
 * the start of the master, across reloads and worker restarts, and
 * approximate once more distinct URLs are seen than a set holds.
 *
 * Memory: URLTOP_K entries of 128 bytes, 32 KiB per slot plus 32 KiB in
 * the header; slots = workers x 8 generations + 1 (17 slots, 576 KiB, with
 * 2 workers).
 */
#ifndef CISTERN_URLTOP_H
#define CISTERN_URLTOP_H

#include <stddef.h>
#include <stdint.h>

#define URLTOP_WAYS 4
#define URLTOP_SETS 64
#define URLTOP_K    (URLTOP_SETS * URLTOP_WAYS)
#define URLTOP_URL  88

struct urltop_ent {
    uint64_t hash;              /* 0: free */
    uint64_t requests;          /* an upper bound: err included */
    uint64_t err;               /* requests inherited when taken */
    uint64_t hits, misses;      /* since taken */
    uint32_t ver;               /* odd while a take writes the entry */
    char     url[URLTOP_URL - 4];
};

struct urltop {
    struct urltop_ent e[URLTOP_K];
};

struct shm;

/* The table's key for a cache key's 16-byte hash (never 0). */
static inline uint64_t
urltop_key(const uint8_t h[16])
{
    uint64_t k;

    __builtin_memcpy(&k, h, 8);
    return k ? k : 1;
}

/* The entry of key k in t: counted one more request; *taken is set when
 * k took the entry now, and then the caller labels it (urltop_label).
 * The worker that owns t only. */
static inline struct urltop_ent *
urltop_count(struct urltop *t, uint64_t k, int *taken)
{
    struct urltop_ent *s = &t->e[(k >> 40) % URLTOP_SETS * URLTOP_WAYS], *min = s;

    for (int w = 0; w < URLTOP_WAYS; w++) {
        if (s[w].hash == k) {
            s[w].requests++;
            *taken = 0;
            return &s[w];
        }
        if (s[w].requests < min->requests)
            min = &s[w];
    }
    *taken = 1;
    return min;
}

/* Take e (from urltop_count, *taken) for key k, labelled with host and
 * target (cut to fit). */
void urltop_take(struct urltop_ent *e, uint64_t k, const char *host, size_t hlen,
                 const char *target, size_t tlen);

/* Add from's entries into to (per set, the busiest URLTOP_WAYS stay).
 * The master, retiring a slot. */
void urltop_merge(struct urltop *to, const struct urltop *from);

/* The figures of key k over the header and every live slot: *out gets the
 * sums (its url the first label seen).  Returns the number of tables that
 * hold k (0: not tracked, *out zeroed). */
int  urltop_lookup(const struct shm *s, uint64_t k, struct urltop_ent *out);

/* The busiest keys over the header and every live slot, equal keys added:
 * up to max entries into out, by requests (by_misses 0) or by misses,
 * highest first.  Allocates a scratch array; returns the count, or -1
 * (out of memory). */
int  urltop_collect(const struct shm *s, int by_misses, struct urltop_ent *out, int max);

#endif /* CISTERN_URLTOP_H */
