/*
 * shm/urltop.c: the busiest URLs' tables (see urltop.h): labelling a
 * taken entry, merging a retired slot's table, and the readers' sums.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "shm/shm.h"
#include "shm/urltop.h"

static void
urltop_begin(struct urltop_ent *e)
{
    __atomic_store_n(&e->ver, e->ver + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void
urltop_end(struct urltop_ent *e)
{
    __atomic_store_n(&e->ver, e->ver + 1, __ATOMIC_RELEASE);
}

void
urltop_take(struct urltop_ent *e, uint64_t k, const char *host, size_t hlen,
            const char *target, size_t tlen)
{
    size_t room = sizeof(e->url) - 1;

    urltop_begin(e);
    e->hash = k;
    e->err = e->requests;
    e->requests++;
    e->hits = e->misses = 0;
    if (hlen > room)
        hlen = room;
    memcpy(e->url, host, hlen);
    if (tlen > room - hlen)
        tlen = room - hlen;
    memcpy(e->url + hlen, target, tlen);
    e->url[hlen + tlen] = '\0';
    urltop_end(e);
}

/* A consistent copy of e into out; 0, or -1 when a take ran meanwhile or
 * the entry is free. */
static int
urltop_copy(const struct urltop_ent *e, struct urltop_ent *out)
{
    uint32_t v = __atomic_load_n(&e->ver, __ATOMIC_ACQUIRE);

    if (v & 1)
        return -1;
    memcpy(out, (const void *)e, sizeof(*out));
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e->ver, __ATOMIC_RELAXED) != v || out->hash == 0 || out->requests == 0)
        return -1;
    out->url[sizeof(out->url) - 1] = '\0';
    return 0;
}

static void
urltop_add(struct urltop_ent *to, const struct urltop_ent *from)
{
    to->requests += from->requests;
    to->err += from->err;
    to->hits += from->hits;
    to->misses += from->misses;
}

void
urltop_merge(struct urltop *to, const struct urltop *from)
{
    for (int s = 0; s < URLTOP_SETS; s++) {
        struct urltop_ent c[2 * URLTOP_WAYS], *dst = &to->e[s * URLTOP_WAYS];
        int n = 0;

        for (int w = 0; w < URLTOP_WAYS; w++)
            if (urltop_copy(&dst[w], &c[n]) == 0)
                n++;
        for (int w = 0; w < URLTOP_WAYS; w++) {
            struct urltop_ent x;
            int i;
            if (urltop_copy(&from->e[s * URLTOP_WAYS + w], &x) < 0)
                continue;
            for (i = 0; i < n && c[i].hash != x.hash; i++)
                ;
            if (i < n)
                urltop_add(&c[i], &x);
            else
                c[n++] = x;
        }
        /* the busiest URLTOP_WAYS first (n <= 8: a selection sort) */
        for (int i = 0; i < n && i < URLTOP_WAYS; i++) {
            int m = i;
            for (int j = i + 1; j < n; j++)
                if (c[j].requests > c[m].requests)
                    m = j;
            struct urltop_ent t = c[i];
            c[i] = c[m];
            c[m] = t;
        }
        for (int w = 0; w < URLTOP_WAYS; w++) {
            struct urltop_ent *d = &dst[w];
            urltop_begin(d);
            if (w < n) {
                d->hash = c[w].hash;
                d->requests = c[w].requests;
                d->err = c[w].err;
                d->hits = c[w].hits;
                d->misses = c[w].misses;
                memcpy(d->url, c[w].url, sizeof(d->url));
            } else {
                d->hash = d->requests = d->err = d->hits = d->misses = 0;
                d->url[0] = '\0';
            }
            urltop_end(d);
        }
    }
}

/* The tables to read: the header's, then each live slot's. */
static const struct urltop *
urltop_table(const struct shm *s, unsigned i)
{
    if (i == 0)
        return &s->hdr->retired_urls;
    return s->slots[i - 1].pid != 0 ? &s->slots[i - 1].urls : NULL;
}

int
urltop_lookup(const struct shm *s, uint64_t k, struct urltop_ent *out)
{
    int found = 0;

    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i <= s->hdr->nslots; i++) {
        const struct urltop *t = urltop_table(s, i);
        if (t == NULL)
            continue;
        const struct urltop_ent *set = &t->e[(k >> 40) % URLTOP_SETS * URLTOP_WAYS];
        for (int w = 0; w < URLTOP_WAYS; w++) {
            struct urltop_ent x;
            if (urltop_copy(&set[w], &x) < 0 || x.hash != k)
                continue;
            if (!found++)
                memcpy(out->url, x.url, sizeof(out->url));
            out->hash = k;
            urltop_add(out, &x);
            break;
        }
    }
    return found;
}

static int
urltop_by_hash(const void *a, const void *b)
{
    const struct urltop_ent *x = a, *y = b;

    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

static int
urltop_by_requests(const void *a, const void *b)
{
    const struct urltop_ent *x = a, *y = b;

    if (x->requests != y->requests)
        return x->requests < y->requests ? 1 : -1;
    return strcmp(x->url, y->url);
}

static int
urltop_by_misses(const void *a, const void *b)
{
    const struct urltop_ent *x = a, *y = b;

    if (x->misses != y->misses)
        return x->misses < y->misses ? 1 : -1;
    return urltop_by_requests(a, b);
}

int
urltop_collect(const struct shm *s, int by_misses, struct urltop_ent *out, int max)
{
    size_t cap = 0, n = 0, m = 0;
    struct urltop_ent *all;

    for (unsigned i = 0; i <= s->hdr->nslots; i++)
        cap += urltop_table(s, i) ? URLTOP_K : 0;   /* live slots: the few of one generation */
    if ((all = malloc(cap * sizeof(*all))) == NULL)
        return -1;
    for (unsigned i = 0; i <= s->hdr->nslots; i++) {
        const struct urltop *t = urltop_table(s, i);
        for (int j = 0; t && j < URLTOP_K && n < cap; j++)
            if (urltop_copy(&t->e[j], &all[n]) == 0)
                n++;
    }
    qsort(all, n, sizeof(*all), urltop_by_hash);
    for (size_t i = 0; i < n; i++) {            /* one entry per key */
        if (m > 0 && all[m - 1].hash == all[i].hash)
            urltop_add(&all[m - 1], &all[i]);
        else
            all[m++] = all[i];
    }
    qsort(all, m, sizeof(*all), by_misses ? urltop_by_misses : urltop_by_requests);
    if (m > (size_t)max)
        m = (size_t)max;
    if (by_misses)
        while (m > 0 && all[m - 1].misses == 0)
            m--;            /* a URL that never missed is no miss row */
    memcpy(out, all, m * sizeof(*out));
    free(all);
    return (int)m;
}
