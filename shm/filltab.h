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

#endif /* CISTERN_FILLTAB_H */
