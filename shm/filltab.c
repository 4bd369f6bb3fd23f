/*
 * shm/filltab.c: the fill table (see filltab.h).
 *
 * Open addressing with linear probing over a power-of-two array; a probe
 * run is bounded (FT_PROBE), and an entry past its deadline (an abandoned
 * claim, an expired hit-for-miss) is free for reuse, so the table never
 * fills up with garbage.  When no entry can be had the caller fetches
 * without collapsing (FT_FULL): correct, just not collapsed.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "shm/filltab.h"

#define FT_MAGIC   0x46544231u      /* "FTB1" */
#define FT_PROBE   16

enum { ENT_FREE = 0, ENT_FILLING, ENT_PASS };

struct ft_ent {
    uint64_t h0, h1;
    int32_t  state;
    int32_t  owner;                 /* FILLING: the filling slot */
    int64_t  until_ms;              /* FILLING: claim deadline; PASS: end */
    uint64_t waiters[4];
};

struct ft_rww {
    uint64_t           h0, h1;
    int32_t            owner;       /* the filling slot */
    int32_t            pad;
    int64_t            until_ms;    /* DONE, FAILED: reusable after */
    uint64_t           joiners[4];  /* slots to wake: those with a joiner */
    uint16_t           njoin[FILLTAB_MAX_SLOTS];    /* joiners per slot */
    struct filltab_rww v;
};

struct filltab {
    uint32_t        magic;
    uint32_t        n;              /* entries, a power of two */
    pthread_mutex_t lock;
    struct ft_rww   rww[FILLTAB_RWW];
    struct ft_ent   e[];
};

size_t
filltab_size(unsigned nentries)
{
    return sizeof(struct filltab) + (size_t)nentries * sizeof(struct ft_ent);
}

int
filltab_init(void *area, unsigned nentries)
{
    struct filltab *ft = area;
    pthread_mutexattr_t a;

    if ((nentries & (nentries - 1)) != 0 || nentries == 0)
        return -1;
    memset(ft, 0, filltab_size(nentries));
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (pthread_mutex_init(&ft->lock, &a) != 0) {
        pthread_mutexattr_destroy(&a);
        return -1;
    }
    pthread_mutexattr_destroy(&a);
    ft->n = nentries;
    ft->magic = FT_MAGIC;
    return 0;
}

int
filltab_check(const struct filltab *ft)
{
    return ft && ft->magic == FT_MAGIC && ft->n && !(ft->n & (ft->n - 1)) ? 0 : -1;
}

static void
ft_lock(struct filltab *ft)
{
    /* A holder that died left at worst one entry half-written, which its
     * deadline retires; the table itself stays usable. */
    if (pthread_mutex_lock(&ft->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&ft->lock);
}

static void
ft_unlock(struct filltab *ft)
{
    pthread_mutex_unlock(&ft->lock);
}

static void
ft_hash(const uint8_t h[16], uint64_t *a, uint64_t *b)
{
    memcpy(a, h, 8);
    memcpy(b, h + 8, 8);
    if (*a == 0 && *b == 0)
        *b = 1;     /* (0,0) marks nothing; a real hash of 0 is remapped */
}

static int
ft_live(const struct ft_ent *e, int64_t now_ms)
{
    return e->state != ENT_FREE && e->until_ms > now_ms;
}

/* Find h's entry (live or not), or the first reusable one on its probe
 * run when absent.  NULL when neither. */
static struct ft_ent *
ft_find(struct filltab *ft, uint64_t a, uint64_t b, int64_t now_ms, int *found)
{
    struct ft_ent *free_e = NULL;
    uint32_t mask = ft->n - 1;

    *found = 0;
    for (uint32_t i = 0; i < FT_PROBE; i++) {
        struct ft_ent *e = &ft->e[(a + i) & mask];
        if (e->h0 == a && e->h1 == b && e->state != ENT_FREE) {
            *found = 1;
            return e;
        }
        if (free_e == NULL && !ft_live(e, now_ms))
            free_e = e;
    }
    return free_e;
}

static void
ft_set_bit(uint64_t m[4], int slot)
{
    m[slot / 64] |= 1ull << (slot % 64);
}

static void
ft_or(uint64_t to[4], const uint64_t from[4])
{
    for (int i = 0; i < 4; i++)
        to[i] |= from[i];
}

int
filltab_claim(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
              int64_t claim_ms)
{
    uint64_t a, b;
    int found, rc;
    struct ft_ent *e;

    if (slot < 0 || slot >= FILLTAB_MAX_SLOTS)
        return FT_FULL;
    ft_hash(h, &a, &b);
    ft_lock(ft);
    e = ft_find(ft, a, b, now_ms, &found);
    if (e == NULL) {
        rc = FT_FULL;
    } else if (found && ft_live(e, now_ms) && e->state == ENT_PASS) {
        rc = FT_PASS;
    } else if (found && ft_live(e, now_ms) && e->state == ENT_FILLING) {
        /* Another connection fills it, maybe in this very worker. */
        ft_set_bit(e->waiters, slot);
        rc = FT_WAIT;
    } else {
        /* absent or expired: claim, keeping any waiters an expired claim
         * still had */
        if (!found) {
            memset(e->waiters, 0, sizeof(e->waiters));
            e->h0 = a;
            e->h1 = b;
        }
        e->state = ENT_FILLING;
        e->owner = slot;
        e->until_ms = now_ms + claim_ms;
        rc = FT_CLAIMED;
    }
    ft_unlock(ft);
    return rc;
}

/* The live claim of h being filled, or NULL (the caller holds the lock). */
static struct ft_ent *
ft_filling(struct filltab *ft, const uint8_t h[16], int64_t now_ms)
{
    uint64_t a, b;
    int found;
    struct ft_ent *e;

    ft_hash(h, &a, &b);
    e = ft_find(ft, a, b, now_ms, &found);
    return found && ft_live(e, now_ms) && e->state == ENT_FILLING ? e : NULL;
}

int
filltab_busy(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms)
{
    int busy;

    ft_lock(ft);
    busy = ft_filling(ft, h, now_ms) != NULL;
    (void)slot;
    ft_unlock(ft);
    return busy;
}

/* h's entry, live or not, or NULL (the caller holds the lock). */
static struct ft_ent *
ft_entry(struct filltab *ft, const uint8_t h[16])
{
    uint64_t a, b;
    int found;
    struct ft_ent *e;

    ft_hash(h, &a, &b);
    e = ft_find(ft, a, b, INT64_MIN, &found);
    return found ? e : NULL;
}

void
filltab_renew(struct filltab *ft, const uint8_t h[16], int slot, int64_t until_ms)
{
    struct ft_ent *e;

    ft_lock(ft);
    e = ft_entry(ft, h);
    if (e && e->state == ENT_FILLING && e->owner == slot && e->until_ms < until_ms)
        e->until_ms = until_ms;
    ft_unlock(ft);
}

void
filltab_waiters(struct filltab *ft, const uint8_t h[16], int64_t now_ms, uint64_t wake[4])
{
    struct ft_ent *e;

    memset(wake, 0, 4 * sizeof(uint64_t));
    ft_lock(ft);
    if ((e = ft_filling(ft, h, now_ms)) != NULL)
        ft_or(wake, e->waiters);
    ft_unlock(ft);
}

void
filltab_release(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
                int64_t pass_ms, uint64_t wake[4])
{
    uint64_t a, b;
    int found;
    struct ft_ent *e;

    memset(wake, 0, 4 * sizeof(uint64_t));
    ft_hash(h, &a, &b);
    ft_lock(ft);
    e = ft_find(ft, a, b, now_ms, &found);
    if (found && e->state == ENT_FILLING && e->owner == slot) {
        ft_or(wake, e->waiters);
        memset(e->waiters, 0, sizeof(e->waiters));
        if (pass_ms > 0) {
            e->state = ENT_PASS;
            e->owner = -1;
            e->until_ms = now_ms + pass_ms;
        } else {
            e->state = ENT_FREE;
        }
    }
    ft_unlock(ft);
}

void
filltab_unwait(struct filltab *ft, const uint8_t h[16], int slot)
{
    struct ft_ent *e;

    ft_lock(ft);
    if ((e = ft_entry(ft, h)) != NULL)
        e->waiters[slot / 64] &= ~(1ull << (slot % 64));
    ft_unlock(ft);
}

void
filltab_slot_reset(struct filltab *ft, int slot, uint64_t wake[4])
{
    memset(wake, 0, 4 * sizeof(uint64_t));
    if (slot < 0 || slot >= FILLTAB_MAX_SLOTS)
        return;
    ft_lock(ft);
    for (int i = 0; i < FILLTAB_RWW; i++) {
        struct ft_rww *r = &ft->rww[i];
        if (r->v.state == RWW_OPEN && r->owner == slot) {
            r->v.state = RWW_FAILED;    /* the filler died: joiners stop short */
            r->until_ms = 0;
            ft_or(wake, r->joiners);
        }
        r->joiners[slot / 64] &= ~(1ull << (slot % 64));
        r->njoin[slot] = 0;
    }
    for (uint32_t i = 0; i < ft->n; i++) {
        struct ft_ent *e = &ft->e[i];
        if (e->state == ENT_FREE)
            continue;
        e->waiters[slot / 64] &= ~(1ull << (slot % 64));
        if (e->state == ENT_FILLING && e->owner == slot) {
            ft_or(wake, e->waiters);
            memset(e->waiters, 0, sizeof(e->waiters));
            e->state = ENT_FREE;
        }
    }
    ft_unlock(ft);
}

/* ------------------------------------------------------------------ */
/* Read-while-writer */

int
filltab_rww_open(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
                 const struct filltab_rww *v)
{
    uint64_t a, b;
    int idx = -1;

    if (slot < 0 || slot >= FILLTAB_MAX_SLOTS || v->next > FILLTAB_RWW_EXT)
        return -1;
    ft_hash(h, &a, &b);
    ft_lock(ft);
    for (int i = 0; i < FILLTAB_RWW && idx < 0; i++) {
        struct ft_rww *r = &ft->rww[i];
        if (r->v.state == RWW_NONE || (r->v.state != RWW_OPEN && r->until_ms <= now_ms))
            idx = i;
    }
    if (idx >= 0) {
        struct ft_rww *r = &ft->rww[idx];
        uint32_t gen = r->v.gen + 1;

        r->h0 = a;
        r->h1 = b;
        r->owner = slot;
        memset(r->joiners, 0, sizeof(r->joiners));
        memset(r->njoin, 0, sizeof(r->njoin));
        r->v = *v;
        r->v.gen = gen ? gen : 1;
        r->v.state = RWW_OPEN;
    }
    ft_unlock(ft);
    return idx;
}

void
filltab_rww_update(struct filltab *ft, int idx, const struct filltab_rww *v,
                   int64_t now_ms, uint64_t wake[4])
{
    struct ft_rww *r;

    memset(wake, 0, 4 * sizeof(uint64_t));
    if (idx < 0 || idx >= FILLTAB_RWW || v->next > FILLTAB_RWW_EXT)
        return;
    r = &ft->rww[idx];
    ft_lock(ft);
    if (r->v.state == RWW_OPEN) {
        uint32_t gen = r->v.gen;

        r->v = *v;
        r->v.gen = gen;
        if (v->state != RWW_OPEN)
            r->until_ms = now_ms + FILLTAB_RWW_LINGER_MS;
        ft_or(wake, r->joiners);
    }
    ft_unlock(ft);
}

int
filltab_rww_join(struct filltab *ft, const uint8_t h[16], int slot, int64_t now_ms,
                 struct filltab_rww *out)
{
    uint64_t a, b;
    int idx = -1;

    (void)now_ms;
    if (slot < 0 || slot >= FILLTAB_MAX_SLOTS)
        return -1;
    ft_hash(h, &a, &b);
    ft_lock(ft);
    for (int i = 0; i < FILLTAB_RWW; i++) {
        struct ft_rww *r = &ft->rww[i];
        if (r->v.state == RWW_OPEN && r->h0 == a && r->h1 == b) {
            ft_set_bit(r->joiners, slot);
            if (r->njoin[slot] < UINT16_MAX)
                r->njoin[slot]++;
            *out = r->v;
            idx = i;
            break;
        }
    }
    ft_unlock(ft);
    return idx;
}

void
filltab_rww_leave(struct filltab *ft, int idx, uint32_t gen, int slot)
{
    struct ft_rww *r;

    if (idx < 0 || idx >= FILLTAB_RWW || slot < 0 || slot >= FILLTAB_MAX_SLOTS)
        return;
    r = &ft->rww[idx];
    ft_lock(ft);
    if (r->v.gen == gen && r->njoin[slot] > 0 && --r->njoin[slot] == 0)
        r->joiners[slot / 64] &= ~(1ull << (slot % 64));
    ft_unlock(ft);
}

int
filltab_rww_get(struct filltab *ft, int idx, uint32_t gen, struct filltab_rww *out)
{
    int rc = -1;

    if (idx < 0 || idx >= FILLTAB_RWW)
        return -1;
    ft_lock(ft);
    if (ft->rww[idx].v.gen == gen && ft->rww[idx].v.state != RWW_NONE) {
        *out = ft->rww[idx].v;
        rc = 0;
    }
    ft_unlock(ft);
    return rc;
}

int
filltab_rww_peek(struct filltab *ft, int idx, struct filltab_rww *out)
{
    int rc = -1;

    if (idx < 0 || idx >= FILLTAB_RWW)
        return -1;
    ft_lock(ft);
    if (ft->rww[idx].v.state == RWW_OPEN) {
        *out = ft->rww[idx].v;
        rc = 0;
    }
    ft_unlock(ft);
    return rc;
}

int
filltab_rww_joined(struct filltab *ft, int idx)
{
    int any = 0;

    if (idx < 0 || idx >= FILLTAB_RWW)
        return 0;
    ft_lock(ft);
    for (int i = 0; i < 4; i++)
        any |= ft->rww[idx].joiners[i] != 0;
    ft_unlock(ft);
    return any;
}

int
filltab_rww_published(struct filltab *ft, const uint8_t h[16])
{
    uint64_t a, b;
    int found = 0;

    ft_hash(h, &a, &b);
    ft_lock(ft);
    for (int i = 0; i < FILLTAB_RWW && !found; i++)
        found = ft->rww[i].v.state == RWW_OPEN && ft->rww[i].h0 == a && ft->rww[i].h1 == b;
    ft_unlock(ft);
    return found;
}
