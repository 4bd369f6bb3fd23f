/*
 * shm/filltab.h: the fill table, for collapsed forwarding across workers.
 *
 * One table in the shared region, keyed by the 128-bit cache key hash.
 * An entry says either "slot S is fetching this object now" (FILLING),
 * with the set of slots that have requests waiting for it, or "this URL
 * answered uncacheable recently" (PASS: Varnish's hit-for-miss, so later
 * requests go straight to the origin instead of queueing behind a fill
 * that will never be stored).
 *
 * Waking: each worker slot has an eventfd, created by the master before
 * the first fork so every process holds all of them; whoever releases an
 * entry writes to the eventfds of its waiters, whose event loops wake at
 * once (no polling).  A worker that dies never leaves waiters stuck: the
 * master, reaping it, releases its entries (filltab_slot_reset) and wakes
 * their waiters, and every claim carries a deadline besides.
 *
 * Locking: one process-shared robust mutex; critical sections are a few
 * loads and stores.  A holder that dies is recovered (EOWNERDEAD).
 */
#ifndef CISTERN_FILLTAB_H
#define CISTERN_FILLTAB_H

#include <stddef.h>
#include <stdint.h>

#define FILLTAB_MAX_SLOTS 256

enum filltab_rc {
    FT_CLAIMED = 0,     /* the caller fetches; others will wait for it */
    FT_WAIT,            /* someone else fetches; the caller is registered */
    FT_PASS,            /* recently uncacheable: fetch, don't claim */
    FT_FULL,            /* no room: fetch without collapsing */
};

struct filltab;

size_t filltab_size(unsigned nentries);
/* Lay out the table in area (shared, zeroed).  Returns 0 or -1. */
int    filltab_init(void *area, unsigned nentries);
int    filltab_check(const struct filltab *ft);

/* A miss on key hash h by slot.  May claim it (FT_CLAIMED, until now_ms +
 * claim_ms), or register slot as a waiter (FT_WAIT) when another slot
 * holds it, or say FT_PASS during a hit-for-miss period. */
int filltab_claim(struct filltab *ft, const uint8_t h[16], int slot,
                  int64_t now_ms, int64_t claim_ms);

/* Is the entry for h still being filled (by any connection, in any slot,
 * ours included)?  A waiter's check when woken or at its deadline. */
int filltab_busy(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms);

/* The filler of h is still receiving its answer: its claim lasts until
 * until_ms at least (while slot still holds it). */
void filltab_renew(struct filltab *ft, const uint8_t h[16], int slot, int64_t until_ms);

/* The filler is done with h: the entry goes away, or turns into a
 * hit-for-miss for pass_ms when pass_ms > 0.  The waiters' slots are
 * returned in wake[] (bitmask of FILLTAB_MAX_SLOTS bits). */
void filltab_release(struct filltab *ft, const uint8_t h[16], int slot,
                     int64_t now_ms, int64_t pass_ms, uint64_t wake[4]);

/* A waiter gives up (timeout or its client left). */
void filltab_unwait(struct filltab *ft, const uint8_t h[16], int slot);

/* The master reaped slot: release its claims and forget it as a waiter.
 * Waiters of released entries are returned in wake[]. */
void filltab_slot_reset(struct filltab *ft, int slot, uint64_t wake[4]);

/*
 * Read-while-writer (issue 21): a fill of known length may be published
 * in one of FILLTAB_RWW slots, next to the claim: where its header block
 * and body extents are in the ring and how many body bytes are written.
 * Joiners (any worker) copy it under the lock, pin the extents and send
 * from the mapping; the filler updates it as the body grows and wakes the
 * joiners' slots (their eventfds), and says DONE or FAILED at the end.
 * A slot outlives its fill by FILLTAB_RWW_LINGER_MS so that a joiner woken
 * late still reads the last state; gen tells a reused slot apart.
 */
#define FILLTAB_RWW            32
#define FILLTAB_RWW_EXT        64
#define FILLTAB_RWW_LINGER_MS  5000

enum { RWW_NONE = 0, RWW_OPEN, RWW_DONE, RWW_FAILED };

struct filltab_rww {
    uint32_t gen;
    int32_t  state;                 /* RWW_* */
    uint64_t total;                 /* the body's length (Content-Length) */
    uint64_t avail;                 /* body bytes written so far */
    uint64_t hdr_off;               /* header block: absolute ring offset */
    uint32_t hdr_len;
    uint32_t next;                  /* extents known */
    int64_t  stored;                /* the object's stored time (Age) */
    uint64_t purge_gen;             /* purges begun when it asked the origin */
    int64_t  expires;               /* the stored meta: freshness, */
    uint16_t status, flags;         /* status, STORE_F_* (no-cache...) */
    uint32_t pad;
    uint64_t ext_off[FILLTAB_RWW_EXT];  /* body byte ext_pos[i]: ring offset */
    uint64_t ext_pos[FILLTAB_RWW_EXT];
};

/* Publish the fill of h by slot: returns the slot's index, or -1 (none
 * free).  v: total, hdr_off, hdr_len, stored, next and the extents. */
int  filltab_rww_open(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
                      const struct filltab_rww *v);
/* The fill grew (avail, extents), or ended (state RWW_DONE or RWW_FAILED):
 * the joiners' slots to wake come back in wake[] (a slot's joiners count
 * until they leave, filltab_rww_leave). */
void filltab_rww_update(struct filltab *ft, int idx, const struct filltab_rww *v,
                        int64_t now_ms, uint64_t wake[4]);
/* Join the open fill of h from slot: a copy in *out, the index returned,
 * or -1 when no fill of h is published and open. */
int  filltab_rww_join(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
                      struct filltab_rww *out);
/* A joiner of generation gen of slot idx leaves (its request ended, or it
 * did not join after all): the slot's joiners no longer count it. */
void filltab_rww_leave(struct filltab *ft, int idx, uint32_t gen, int slot);
/* A joiner's fresh copy of slot idx, when it is still generation gen:
 * returns 0, else -1 (the fill is gone: treat as failed). */
int  filltab_rww_get(struct filltab *ft, int idx, uint32_t gen, struct filltab_rww *out);

/* The slots waiting on the claim of h, in wake[]: the filler publishing
 * its fill wakes them, so that a request which came before the origin's
 * head joins the fill as it grows instead of waiting for all of it. */
void filltab_waiters(struct filltab *ft, const uint8_t h[16], int64_t now_ms, uint64_t wake[4]);
/* Is a fill of h published and open? */
int  filltab_rww_published(struct filltab *ft, const uint8_t h[16]);
/* Does any joiner follow the fill published in slot idx now? */
int  filltab_rww_joined(struct filltab *ft, int idx);
/* The filler's own copy of its slot idx (0, or -1 when it is not open). */
int  filltab_rww_peek(struct filltab *ft, int idx, struct filltab_rww *out);

#endif /* CISTERN_FILLTAB_H */
