/*
 * shm/parenttab.c: the shared parent table (see parenttab.h).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "shm/log.h"
#include "shm/parenttab.h"

#define PT_MAGIC 0x50544231u        /* "PTB1" */

struct pt_ent {
    char     name[PT_NAME];
    uint32_t used;
    uint32_t seq;                   /* odd while the name is rewritten */
    uint64_t last;                  /* pt->clock at its last request */
    int32_t  fails;                 /* failures in the current window */
    int64_t  window;                /* when the window's first failure was */
    int64_t  down;                  /* marked down at (0: up) */
    int32_t  probing;               /* a probe is out */
    int32_t  latched;
    int32_t  forced;                /* `cistern ctl host down`: down until
                                       `host up`, whatever probes say */
    uint64_t rr;
    uint64_t requests, failures, markdowns;
};

struct parenttab {
    uint32_t        magic;
    uint32_t        n;              /* entries used */
    uint64_t        clock;          /* counts requests: the LRU order */
    pthread_mutex_t lock;
    struct pt_ent   e[PT_MAX];
};

size_t
parenttab_size(void)
{
    return sizeof(struct parenttab);
}

int
parenttab_init(void *area)
{
    struct parenttab *pt = area;
    pthread_mutexattr_t a;

    memset(pt, 0, sizeof(*pt));
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    if (pthread_mutex_init(&pt->lock, &a) != 0) {
        pthread_mutexattr_destroy(&a);
        return -1;
    }
    pthread_mutexattr_destroy(&a);
    pt->magic = PT_MAGIC;
    return 0;
}

int
parenttab_check(const struct parenttab *pt)
{
    return pt && pt->magic == PT_MAGIC ? 0 : -1;
}

static void
pt_lock(struct parenttab *pt)
{
    if (pthread_mutex_lock(&pt->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&pt->lock);
}

static void
pt_unlock(struct parenttab *pt)
{
    pthread_mutex_unlock(&pt->lock);
}

int
parenttab_count(const struct parenttab *pt)
{
    return (int)__atomic_load_n(&pt->n, __ATOMIC_ACQUIRE);
}

/* Unlocked lookup: a name being rewritten (seq odd or changed) is not
 * trusted; the locked path decides. */
static int
pt_find_unlocked(struct parenttab *pt, const char *name)
{
    int n = parenttab_count(pt);

    for (int i = 0; i < n; i++) {
        struct pt_ent *e = &pt->e[i];
        uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);

        if ((s & 1) == 0 && strcmp(e->name, name) == 0) {
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s)
                return i;
        }
    }
    return -1;
}

/* The table is full: the least recently used entry becomes name's (a
 * parent that left the configuration long ago, after reloads named more
 * than PT_MAX parents in all); its state and counters start afresh. */
static int
pt_reclaim(struct parenttab *pt, const char *name)
{
    int lru = 0;

    for (int i = 1; i < PT_MAX; i++)
        if (pt->e[i].last < pt->e[lru].last)
            lru = i;
    struct pt_ent *e = &pt->e[lru];
    log_warn("parent table full (%d parents): %s takes the entry of %s, "
             "least recently used", PT_MAX, name, e->name);
    __atomic_store_n(&e->seq, e->seq + 1, __ATOMIC_RELEASE);     /* odd */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    snprintf(e->name, PT_NAME, "%s", name);
    e->fails = 0;
    e->window = e->down = 0;
    e->probing = e->latched = e->forced = 0;
    e->rr = e->requests = e->failures = e->markdowns = 0;
    e->last = __atomic_load_n(&pt->clock, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, e->seq + 1, __ATOMIC_RELEASE);     /* even */
    return lru;
}

int
parenttab_find(struct parenttab *pt, const char *name)
{
    int i = pt_find_unlocked(pt, name);

    if (i >= 0)
        return i;
    pt_lock(pt);
    for (i = 0; i < (int)pt->n; i++)        /* another worker may have added it */
        if (strcmp(pt->e[i].name, name) == 0)
            break;
    if (i == (int)pt->n) {
        if (i >= PT_MAX) {
            i = pt_reclaim(pt, name);
        } else {
            snprintf(pt->e[i].name, PT_NAME, "%s", name);
            pt->e[i].used = 1;
            __atomic_store_n(&pt->n, pt->n + 1, __ATOMIC_RELEASE);
        }
    }
    pt_unlock(pt);
    return i;
}

int
parenttab_usable(struct parenttab *pt, int i, int64_t now, int retry_time)
{
    struct pt_ent *e = &pt->e[i];
    int rc = PT_UP;

    if (__atomic_load_n(&e->down, __ATOMIC_RELAXED) == 0)
        return PT_UP;
    pt_lock(pt);
    if (e->forced) {
        rc = PT_DOWN;
    } else if (e->down != 0) {
        /* A probe out since e->down (claimed then) that never reported
         * (its client went away, its worker died, its parent answered
         * with a status retried elsewhere) does not hold the parent down
         * for ever: after another retry_time the next request probes. */
        if (now - e->down >= retry_time) {
            e->probing = 1;
            e->down = now;      /* the others wait for the probe's verdict */
            rc = PT_PROBING;
        } else {
            rc = PT_DOWN;
        }
    }
    pt_unlock(pt);
    return rc;
}

void
parenttab_request(struct parenttab *pt, int i)
{
    __atomic_fetch_add(&pt->e[i].requests, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&pt->e[i].last,
                     __atomic_add_fetch(&pt->clock, 1, __ATOMIC_RELAXED),
                     __ATOMIC_RELAXED);
}

void
parenttab_ok(struct parenttab *pt, int i)
{
    struct pt_ent *e = &pt->e[i];

    if (__atomic_load_n(&e->down, __ATOMIC_RELAXED) == 0
        && __atomic_load_n(&e->fails, __ATOMIC_RELAXED) == 0)
        return;
    pt_lock(pt);
    if (!e->forced) {
        e->down = 0;
        e->probing = 0;
        e->fails = 0;
        e->window = 0;
    }
    pt_unlock(pt);
}

int
parenttab_lookup(struct parenttab *pt, const char *name)
{
    int i = pt_find_unlocked(pt, name);

    if (i >= 0)
        return i;
    pt_lock(pt);
    for (i = 0; i < (int)pt->n; i++)
        if (strcmp(pt->e[i].name, name) == 0)
            break;
    if (i == (int)pt->n)
        i = -1;
    pt_unlock(pt);
    return i;
}

void
parenttab_force(struct parenttab *pt, int i, int down, int64_t now)
{
    struct pt_ent *e = &pt->e[i];

    pt_lock(pt);
    e->forced = down;
    e->probing = 0;
    e->fails = 0;
    e->window = 0;
    if (down) {
        if (e->down == 0)
            e->markdowns++;
        e->down = now;
    } else {
        e->down = 0;
    }
    pt_unlock(pt);
}

int
parenttab_fail(struct parenttab *pt, int i, int64_t now, int threshold,
               int retry_time)
{
    struct pt_ent *e = &pt->e[i];
    int marked = 0;

    __atomic_fetch_add(&e->failures, 1, __ATOMIC_RELAXED);
    pt_lock(pt);
    if (e->down != 0) {
        e->down = now;          /* a probe (or a late failure): down again */
        e->probing = 0;
    } else {
        if (e->window == 0 || now - e->window >= retry_time) {
            e->window = now;
            e->fails = 0;
        }
        if (++e->fails >= threshold) {
            e->down = now;
            e->fails = 0;
            e->window = 0;
            e->markdowns++;
            marked = 1;
        }
    }
    pt_unlock(pt);
    return marked;
}

uint64_t
parenttab_next(struct parenttab *pt, int i)
{
    return __atomic_fetch_add(&pt->e[i].rr, 1, __ATOMIC_RELAXED);
}

int
parenttab_latched(struct parenttab *pt, int i)
{
    return __atomic_load_n(&pt->e[i].latched, __ATOMIC_RELAXED);
}

void
parenttab_set_latched(struct parenttab *pt, int i, int v)
{
    __atomic_store_n(&pt->e[i].latched, v, __ATOMIC_RELAXED);
}

void
parenttab_get(struct parenttab *pt, int i, int64_t now, int retry_time,
              struct parenttab_stat *out)
{
    struct pt_ent *e = &pt->e[i];

    pt_lock(pt);
    memcpy(out->name, e->name, PT_NAME);
    out->requests = e->requests;
    out->failures = e->failures;
    out->markdowns = e->markdowns;
    out->forced = e->forced;
    out->state = e->forced ? PT_DOWN : e->down == 0 ? PT_UP
               : e->probing || now - e->down >= retry_time ? PT_PROBING : PT_DOWN;
    pt_unlock(pt);
}
