/*
 * cache/purge.c: invalidation by tag, by key prefix, everything (issue 23).
 *
 * Three LMDB named DBs beside `obj`, kept in the same write txn as every
 * change to it (FORMAT.md "Purge tables"):
 *     ptag  tag -> key hash            (DUPSORT, DUPFIXED: one row per tag)
 *     pkey  key (first keymax bytes) -> key hash   (DUPSORT, DUPFIXED)
 *     prev  key hash -> the pkey key and the tags  (what to delete later)
 * An entry put (fill, PUSH, 304 refresh) forgets the hash's old rows and
 * adds the new ones, read from the record it was just written to (the key
 * and the header block's Surrogate-Key and Cache-Tag fields); an entry
 * deleted (PURGE, sweep, eviction, damage) forgets them.  A relocation
 * copies a record unchanged, so it changes nothing here.
 *
 * A purge collects the hashes from one read snapshot (a tag's dups, a
 * range of pkey, or all of obj), sorts and dedupes them, then, in write
 * txns of PIX_BATCH hashes, deletes each entry (hard) or lowers its
 * `expires` to the purge time (soft: the entry goes stale, the next
 * request revalidates; lookup.c serves the lower of the entry's and the
 * record's expiry); a hard `all` is one txn that empties the tables.  The
 * last batch commits, then the env syncs, before it returns: every
 * worker's next lookup (a new read txn each time) sees it, and a kill -9
 * or a power cut after the answer keeps it.  Cost: O(k log n) for k
 * objects touched out of n, O(n) for all; nothing is kept per purge, so
 * nothing grows with the number of purges issued and the hit path is the
 * same as without purges.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cache/cache-int.h"

#define PIX_VERSION   1u            /* of the three tables; meta "pix" */
#define PIX_KEYMAX    480u          /* pkey keys: LMDB's keys are <= 511 bytes */
#define PIX_TAGS_MAX  64            /* tags kept per object (the rest ignored) */
#define PIX_TAG_MAX   255u          /* longer tags are ignored (rev stores a byte) */
#define PIX_REV_MAX   (4 + PIX_KEYMAX + 2048)
#define PIX_BATCH     2048          /* candidates per write txn (pix_apply_all) */

static const char pix_meta_key[] = "pix";

/* A parsed rev row: the pkey key and the tags (pointers into the row). */
struct pix_set {
    const char *key;
    size_t      keylen;
    int         ntags;
    const char *tag[PIX_TAGS_MAX];
    uint8_t     taglen[PIX_TAGS_MAX];
};

/* One purge candidate. */
struct pix_cand {
    uint8_t hash[16];
    int16_t check;      /* >= 0: the index of a prefix longer than PIX_KEYMAX to
                         * compare with the record's key; -1 matched already */
};

int
cache_pix_open(struct cache *c, MDB_txn *txn)
{
    int rc;
    unsigned dup = MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED;

    if ((rc = mdb_dbi_open(txn, "ptag", dup, &c->dbi_tag)) != 0
        || (rc = mdb_dbi_open(txn, "pkey", dup, &c->dbi_key)) != 0
        || (rc = mdb_dbi_open(txn, "prev", MDB_CREATE, &c->dbi_rev)) != 0)
        return rc;
    return 0;
}

static int
pix_tag_known(const struct pix_set *s, const char *t, size_t n)
{
    for (int i = 0; i < s->ntags; i++)
        if (s->taglen[i] == n && memcmp(s->tag[i], t, n) == 0)
            return 1;
    return 0;
}

/* The values of one field line (after the colon) split at sep (and
 * surrounding blanks), into s. */
static void
pix_split(struct pix_set *s, const char *p, const char *end, int comma, size_t *total)
{
    while (p < end && s->ntags < PIX_TAGS_MAX) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || (comma && *p == ',')))
            p++;
        if (p == end)
            break;
        const char *t = p;
        while (p < end && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n'
               && !(comma && *p == ','))
            p++;
        size_t n = (size_t)(p - t);
        if (comma)      /* a comma list's items may hold spaces: up to the comma */
            while (p < end && *p != ',' && *p != '\r' && *p != '\n') {
                p++;
                if (p[-1] != ' ' && p[-1] != '\t')
                    n = (size_t)(p - t);
            }
        if (n == 0 || n > PIX_TAG_MAX || *total + 1 + n > PIX_REV_MAX - 4 - PIX_KEYMAX
            || pix_tag_known(s, t, n))
            continue;
        s->tag[s->ntags] = t;
        s->taglen[s->ntags++] = (uint8_t)n;
        *total += 1 + n;
    }
}

/*
 * See cache-int.h.  Header block lines are "Name: value\r\n" after the
 * status line.  Surrogate-Key lists tags separated by spaces (Fastly),
 * Cache-Tag by commas (Cloudflare); several lines of either add up.
 * Tags are compared byte for byte.
 */
int
cache_pix_tags(const char *blk, size_t len, const char **tag, uint8_t *taglen, int max)
{
    struct pix_set s;
    const char *p = memchr(blk, '\n', len), *end = blk + len;
    size_t total = 0;

    s.ntags = 0;
    while (p && ++p < end) {
        const char *e = memchr(p, '\n', (size_t)(end - p));
        const char *le = e ? e : end;
        size_t ll = (size_t)(le - p);

        if (ll > 14 && strncasecmp(p, "surrogate-key:", 14) == 0)
            pix_split(&s, p + 14, le, 0, &total);
        else if (ll > 10 && strncasecmp(p, "cache-tag:", 10) == 0)
            pix_split(&s, p + 10, le, 1, &total);
        p = e;
    }
    for (int i = 0; i < s.ntags && i < max; i++) {
        tag[i] = s.tag[i];
        taglen[i] = s.taglen[i];
    }
    return s.ntags < max ? s.ntags : max;
}

static size_t
pix_keymax(const struct cache *c)
{
    size_t m = (size_t)mdb_env_get_maxkeysize(c->env);

    return m < PIX_KEYMAX ? m : PIX_KEYMAX;
}

/* Decode a rev row; 0, or -1 if it is not one of ours. */
static int
pix_rev_decode(const MDB_val *v, struct pix_set *s)
{
    const uint8_t *p = v->mv_data, *end = p + v->mv_size;
    uint16_t kl, nt;

    if (v->mv_size < 4)
        return -1;
    memcpy(&kl, p, 2);
    memcpy(&nt, p + 2, 2);
    p += 4;
    if (kl > (size_t)(end - p) || nt > PIX_TAGS_MAX)
        return -1;
    s->key = (const char *)p;
    s->keylen = kl;
    p += kl;
    s->ntags = 0;
    for (int i = 0; i < nt; i++) {
        if (p >= end || *p == 0 || *p > (size_t)(end - p - 1))
            return -1;
        s->taglen[i] = *p;
        s->tag[i] = (const char *)p + 1;
        p += 1 + *p;
        s->ntags++;
    }
    return 0;
}

static int
pix_del_dup(MDB_txn *txn, MDB_dbi dbi, const void *k, size_t kl, const uint8_t hash[16])
{
    MDB_val key = { kl, (void *)(uintptr_t)k }, val = { 16, (void *)(uintptr_t)hash };
    int rc = mdb_del(txn, dbi, &key, &val);

    return rc == MDB_NOTFOUND ? 0 : rc;
}

/*
 * See cache-int.h: drop hash's pkey and ptag rows and its rev row.
 */
int
cache_pix_forget(struct cache *c, MDB_txn *txn, const uint8_t hash[16])
{
    MDB_val k = { 16, (void *)(uintptr_t)hash }, v;
    struct pix_set s;
    uint8_t row[PIX_REV_MAX];
    int rc = mdb_get(txn, c->dbi_rev, &k, &v);

    if (rc == MDB_NOTFOUND)
        return 0;
    if (rc != 0)
        return rc;
    if (v.mv_size <= sizeof(row)) {
        /* copied: the deletes below may move the page it points into */
        memcpy(row, v.mv_data, v.mv_size);
        v.mv_data = row;
        if (pix_rev_decode(&v, &s) == 0) {
            if (s.keylen && (rc = pix_del_dup(txn, c->dbi_key, s.key, s.keylen, hash)) != 0)
                return rc;
            for (int i = 0; i < s.ntags; i++)
                if ((rc = pix_del_dup(txn, c->dbi_tag, s.tag[i], s.taglen[i], hash)) != 0)
                    return rc;
        }
    }
    rc = mdb_del(txn, c->dbi_rev, &k, NULL);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Add hash's rows for key and header block blk. */
static int
pix_add(struct cache *c, MDB_txn *txn, const uint8_t hash[16], const char *key,
        size_t keylen, const char *blk, size_t blklen)
{
    const char *tag[PIX_TAGS_MAX];
    uint8_t taglen[PIX_TAGS_MAX], row[PIX_REV_MAX];
    MDB_val k, v = { 16, (void *)(uintptr_t)hash };
    size_t kl = keylen < pix_keymax(c) ? keylen : pix_keymax(c), o = 4;
    int nt = cache_pix_tags(blk, blklen, tag, taglen, PIX_TAGS_MAX), rc;
    uint16_t kl16 = (uint16_t)kl, nt16 = (uint16_t)nt;

    memcpy(row, &kl16, 2);
    memcpy(row + 2, &nt16, 2);
    memcpy(row + o, key, kl);
    o += kl;
    k.mv_size = kl;
    k.mv_data = (void *)(uintptr_t)key;
    if (kl && (rc = mdb_put(txn, c->dbi_key, &k, &v, 0)) != 0 && rc != MDB_KEYEXIST)
        return rc;
    for (int i = 0; i < nt; i++) {
        row[o] = taglen[i];
        memcpy(row + o + 1, tag[i], taglen[i]);
        o += 1 + (size_t)taglen[i];
        k.mv_size = taglen[i];
        k.mv_data = (void *)(uintptr_t)tag[i];
        v.mv_size = 16;
        v.mv_data = (void *)(uintptr_t)hash;
        if ((rc = mdb_put(txn, c->dbi_tag, &k, &v, 0)) != 0 && rc != MDB_KEYEXIST)
            return rc;
    }
    k.mv_size = 16;
    k.mv_data = (void *)(uintptr_t)hash;
    v.mv_size = o;
    v.mv_data = row;
    return mdb_put(txn, c->dbi_rev, &k, &v, 0);
}

/*
 * See cache-int.h.  The record at e->off was just written and checked by
 * the caller, which still holds its segment pinned.
 */
int
cache_pix_set(struct cache *c, MDB_txn *txn, const uint8_t hash[16], const struct cache_ent *e)
{
    const struct cache_rec *r = (const struct cache_rec *)cache_ring_ptr(c, e->off);
    const char *key = (const char *)(r + 1);
    int rc;

    if ((rc = cache_pix_forget(c, txn, hash)) != 0)
        return rc;
    if (r->key_len != e->key_len || r->hdr_len != e->hdr_len)
        return 0;       /* not the record it names: nothing to index */
    return pix_add(c, txn, hash, key, r->key_len, key + r->key_len, r->hdr_len);
}

/* ------------------------------------------------------------------ */
/* Purge */

uint64_t
cache_purge_gen(const struct cache *c)
{
    return __atomic_load_n(&c->shm->purge_gen, __ATOMIC_SEQ_CST);
}

void
cache_fill_since(struct cache_fill *f, uint64_t gen)
{
    if (f && f->magic == CACHE_FILL_MAGIC && gen < f->purge_gen)
        f->purge_gen = gen;
}

struct pix_run {
    struct cache *c;
    MDB_txn      *txn;
    const struct cache_purge_req *pr;
    struct pix_cand *cand;
    size_t        n, max;
    int64_t       count;
};

static int
pix_cand_add(struct pix_run *pu, const void *hash, int check)
{
    if (pu->n == pu->max) {
        size_t max = pu->max ? pu->max * 2 : 1024;
        struct pix_cand *nc = realloc(pu->cand, max * sizeof(*nc));
        if (nc == NULL)
            return ENOMEM;
        pu->cand = nc;
        pu->max = max;
    }
    memcpy(pu->cand[pu->n].hash, hash, 16);
    pu->cand[pu->n].check = (int16_t)check;
    pu->n++;
    return 0;
}

static int
pix_cand_cmp(const void *a, const void *b)
{
    const struct pix_cand *x = a, *y = b;
    int d = memcmp(x->hash, y->hash, 16);

    return d ? d : x->check - y->check;     /* -1 (matched) first */
}

/* Every hash filed under one key of a DUPSORT table (a tag), or under
 * every key starting with arg (a prefix). */
static int
pix_collect(struct pix_run *pu, MDB_dbi dbi, const char *arg, size_t len, int prefix, int ai)
{
    MDB_cursor *cur;
    MDB_val k, v;
    size_t kl = len < pix_keymax(pu->c) ? len : pix_keymax(pu->c);
    int rc, check = prefix && len > kl ? ai : -1;

    if (kl == 0 && !prefix)
        return 0;
    if ((rc = mdb_cursor_open(pu->txn, dbi, &cur)) != 0)
        return rc;
    k.mv_size = kl;
    k.mv_data = (void *)(uintptr_t)arg;
    if (kl == 0)
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    else
        rc = mdb_cursor_get(cur, &k, &v, prefix ? MDB_SET_RANGE : MDB_SET_KEY);
    while (rc == 0) {
        if (prefix ? k.mv_size < kl || memcmp(k.mv_data, arg, kl) != 0
                   : k.mv_size != kl || memcmp(k.mv_data, arg, kl) != 0)
            break;
        if (v.mv_size == 16 && (rc = pix_cand_add(pu, v.mv_data, check)) != 0)
            break;
        rc = mdb_cursor_get(cur, &k, &v, prefix ? MDB_NEXT : MDB_NEXT_DUP);
    }
    mdb_cursor_close(cur);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/* Is e (valid, alive, pinned here) the object of a key starting with the
 * whole of prefix ai?  For prefixes longer than what pkey keeps. */
static int
pix_full_match(struct pix_run *pu, const struct cache_ent *e, int ai)
{
    const struct cache_purge_req *pr = pu->pr;
    const struct cache_rec *r;
    const char *why;
    int ok = 0;

    if (cache_ent_pin(pu->c, e) < 0)
        return 0;
    r = (const struct cache_rec *)cache_ring_ptr(pu->c, e->off);
    if (cache_rec_check(r, e->off, pu->c->g.seg_size - e->off % pu->c->g.seg_size, &why) == 0
        && r->key_len >= pr->len[ai] && memcmp(r + 1, pr->arg[ai], pr->len[ai]) == 0)
        ok = 1;
    cache_ent_unpin(pu->c, e);
    return ok;
}

static int
pix_alive(const struct cache *c, const struct cache_ent *e)
{
    return cache_ent_valid(e) && e->type == CACHE_ENT_OBJECT
           && cache_ring_alive(c->shm, e->off) && cache_ring_alive(c->shm, e->body_off);
}

/* Apply the purge to one candidate; *done = 1 once it matched (its
 * hash's later candidates are then skipped).  0 or an LMDB error. */
static int
pix_apply_one(struct pix_run *pu, const struct pix_cand *pc, int *done)
{
    const struct cache_purge_req *pr = pu->pr;
    MDB_val k = { 16, (void *)(uintptr_t)pc->hash }, v;
    struct cache_ent e;
    int rc, alive, counts;

    rc = mdb_get(pu->txn, pu->c->dbi_obj, &k, &v);
    if (rc != 0)
        return rc == MDB_NOTFOUND ? 0 : rc;
    memset(&e, 0, sizeof(e));
    if (v.mv_size == sizeof(e))
        memcpy(&e, v.mv_data, sizeof(e));
    alive = pix_alive(pu->c, &e);
    if (pc->check >= 0 && (!alive || !pix_full_match(pu, &e, pc->check)))
        return 0;
    *done = 1;
    counts = alive && !(e.flags & pr->skip_flags);
    if (!pr->soft) {
        if ((rc = mdb_del(pu->txn, pu->c->dbi_obj, &k, NULL)) != 0)
            return rc;
        if ((rc = cache_pix_forget(pu->c, pu->txn, pc->hash)) != 0)
            return rc;
    } else if (counts) {
        if (e.expires > pr->now - 1)
            e.expires = pr->now - 1;
        v.mv_size = sizeof(e);
        v.mv_data = &e;
        if ((rc = mdb_put(pu->txn, pu->c->dbi_obj, &k, &v, 0)) != 0)
            return rc;
    }
    pu->count += counts;
    return 0;
}

/* Everything, hard: count the live entries, then empty the four tables
 * (mdb_drop frees their pages without copying a leaf).  One txn. */
static int
pix_all_hard(struct pix_run *pu)
{
    struct cache *c = pu->c;
    MDB_cursor *cur;
    MDB_val k, v;
    struct cache_ent e;
    int rc;

    if ((rc = mdb_txn_begin(c->env, NULL, 0, &pu->txn)) != 0)
        return rc;
    if ((rc = mdb_cursor_open(pu->txn, c->dbi_obj, &cur)) != 0)
        goto abort;
    pu->count = 0;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (v.mv_size != sizeof(e))
            continue;
        memcpy(&e, v.mv_data, sizeof(e));
        pu->count += pix_alive(c, &e) && !(e.flags & pu->pr->skip_flags);
    }
    mdb_cursor_close(cur);
    if (rc != MDB_NOTFOUND)
        goto abort;
    if ((rc = mdb_drop(pu->txn, c->dbi_obj, 0)) != 0 || (rc = mdb_drop(pu->txn, c->dbi_tag, 0)) != 0
        || (rc = mdb_drop(pu->txn, c->dbi_key, 0)) != 0 || (rc = mdb_drop(pu->txn, c->dbi_rev, 0)) != 0)
        goto abort;
    return mdb_txn_commit(pu->txn);
abort:
    mdb_txn_abort(pu->txn);
    return rc;
}

/* The candidates, from one read snapshot: a tag's dups, prefix ranges,
 * the keys' hashes, or every entry (a soft all).  Sorted by hash. */
static int
pix_gather(struct pix_run *pu)
{
    const struct cache_purge_req *pr = pu->pr;
    struct cache *c = pu->c;
    MDB_cursor *cur;
    MDB_val k, v;
    uint8_t hash[16];
    int rc = 0;

    if ((rc = mdb_txn_renew(c->rtxn)) != 0)
        return rc;
    pu->txn = c->rtxn;
    if (pr->kind == CACHE_PURGE_ALL) {
        if ((rc = mdb_cursor_open(pu->txn, c->dbi_obj, &cur)) == 0) {
            for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
                 rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
                if (k.mv_size == 16 && (rc = pix_cand_add(pu, k.mv_data, -1)) != 0)
                    break;
            mdb_cursor_close(cur);
            rc = rc == MDB_NOTFOUND ? 0 : rc;
        }
    } else {
        for (int i = 0; i < pr->nargs && rc == 0; i++) {
            if (pr->kind == CACHE_PURGE_KEY) {
                cache_key_hash(c, pr->arg[i], pr->len[i], hash);
                rc = pix_cand_add(pu, hash, -1);
            } else {
                rc = pix_collect(pu, pr->kind == CACHE_PURGE_TAG ? c->dbi_tag : c->dbi_key,
                                 pr->arg[i], pr->len[i], pr->kind == CACHE_PURGE_PREFIX, i);
            }
        }
    }
    mdb_txn_reset(c->rtxn);
    pu->txn = NULL;
    if (rc == 0 && pu->n > 1)
        qsort(pu->cand, pu->n, sizeof(*pu->cand), pix_cand_cmp);
    return rc;
}

/* Apply candidates [from, to) in one write txn; adds to pu->count only
 * once it committed. */
static int
pix_apply_batch(struct pix_run *pu, size_t from, size_t to)
{
    int64_t before = pu->count;
    int rc, done = 0;

    if ((rc = mdb_txn_begin(pu->c->env, NULL, 0, &pu->txn)) != 0)
        return rc;
    for (size_t i = from; i < to && rc == 0; i++) {
        /* a hash's candidates are adjacent (sorted), its matched (-1)
         * one first: once one matched, the rest are skipped (a soft
         * purge leaves the entry, which must count once) */
        if (i > from && memcmp(pu->cand[i].hash, pu->cand[i - 1].hash, 16) == 0) {
            if (done)
                continue;
        } else {
            done = 0;
        }
        rc = pix_apply_one(pu, &pu->cand[i], &done);
    }
    if (rc == 0)
        rc = mdb_txn_commit(pu->txn);
    else
        mdb_txn_abort(pu->txn);
    pu->txn = NULL;
    if (rc != 0)
        pu->count = before;
    return rc;
}

/*
 * The candidates in batches of PIX_BATCH write txns.  One txn for all
 * would copy (LMDB copies on write) nearly every leaf of four trees for a
 * purge of a tenth of the index, and run a map sized for the index out of
 * pages; sorted by hash, a batch covers one stretch of obj and prev.
 * A batch that finds the map full evicts, then is retried, smaller.
 */
static int
pix_apply_all(struct pix_run *pu)
{
    size_t i = 0, batch = PIX_BATCH;
    int rc = 0, full = 0;

    while (i < pu->n) {
        size_t to = i + batch < pu->n ? i + batch : pu->n;
        /* a hash's candidates stay in one batch (the dedupe looks back) */
        while (to < pu->n && memcmp(pu->cand[to].hash, pu->cand[to - 1].hash, 16) == 0)
            to++;
        rc = pix_apply_batch(pu, i, to);
        if (rc == MDB_MAP_FULL && full++ < 8) {
            cache_index_evict(pu->c);
            batch = batch > 16 ? batch / 4 : batch;
            continue;
        }
        if (rc != 0)
            return rc;
        i = to;
    }
    return 0;
}

/*
 * See cache.h.
 */
int64_t
cache_purge(struct cache *c, const struct cache_purge_req *pr)
{
    struct pix_run pu;
    int rc = 0;

    assert(c && c->magic == CACHE_MAGIC);
    if (pr == NULL || pr->kind < CACHE_PURGE_KEY || pr->kind > CACHE_PURGE_ALL
        || (pr->kind != CACHE_PURGE_ALL && (pr->nargs <= 0 || pr->nargs > 1024)))
        return CACHE_INVAL;
    memset(&pu, 0, sizeof(pu));
    pu.c = c;
    pu.pr = pr;
    /* before the snapshot: a fill that commits after it is stored stale */
    __atomic_add_fetch(&c->shm->purge_gen, 1, __ATOMIC_SEQ_CST);
    if (pr->kind == CACHE_PURGE_ALL && !pr->soft) {
        for (int attempt = 0; attempt < 3; attempt++) {
            if ((rc = pix_all_hard(&pu)) != MDB_MAP_FULL)
                break;
            cache_index_evict(c);   /* even a drop needs free-list pages */
        }
    } else if ((rc = pix_gather(&pu)) == 0) {
        rc = pix_apply_all(&pu);
    }
    free(pu.cand);
    if (rc == 0 && (rc = mdb_env_sync(c->env, 1)) != 0)
        cache_log_error("cache: purge: sync: %s", mdb_strerror(rc));
    if (rc == 0)
        return pu.count;
    cache_log_error("cache: purge: %s", mdb_strerror(rc));
    return rc == MDB_MAP_FULL ? CACHE_FULL : CACHE_ERROR;
}

/* ------------------------------------------------------------------ */
/* A store from before the tables (or whose tables are of another version):
 * empty them and fill them by one walk of the index.  In the prepare
 * child, nothing else has the store open: records are read with pread. */

static int
pix_rec_read(int fd, const struct cache *c, const struct cache_ent *e, uint8_t **buf,
             size_t *cap)
{
    uint64_t slot = (e->off / c->g.seg_size) % c->g.nseg, so = e->off % c->g.seg_size;
    off_t at = (off_t)(CACHE_HDR_SIZE + slot * c->g.seg_size + so);
    struct cache_rec r;
    size_t need;
    const char *why;

    if (pread(fd, &r, sizeof(r), at) != (ssize_t)sizeof(r) || r.magic != CACHE_REC_MAGIC
        || r.key_len != e->key_len || r.hdr_len != e->hdr_len || r.abs_off != e->off
        || r.key_len > c->g.seg_size || r.hdr_len > c->g.seg_size)
        return -1;
    need = CACHE_REC_SIZE + cache_rec_sumlen(&r);
    if (need > c->g.seg_size - so || r.rec_len > c->g.seg_size - so || need > r.rec_len)
        return -1;
    if (need > *cap) {
        uint8_t *nb = realloc(*buf, need);
        if (nb == NULL)
            return -1;
        *buf = nb;
        *cap = need;
    }
    if (pread(fd, *buf, need, at) != (ssize_t)need)
        return -1;
    /* the check reads only the struct, key, header block (and link) */
    return cache_rec_check((const struct cache_rec *)*buf, e->off, r.rec_len, &why);
}

static int
pix_fill_all(struct cache *c, int fd, MDB_txn *txn, size_t *nrows)
{
    MDB_cursor *cur;
    MDB_val k, v;
    struct cache_ent e;
    uint8_t *buf = NULL, hash[16];
    size_t cap = 0;
    int rc;

    if ((rc = mdb_cursor_open(txn, c->dbi_obj, &cur)) != 0)
        return rc;
    for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (k.mv_size != 16 || v.mv_size != sizeof(e))
            continue;
        memcpy(&e, v.mv_data, sizeof(e));
        memcpy(hash, k.mv_data, 16);
        if (!cache_ent_valid(&e) || e.type != CACHE_ENT_OBJECT
            || pix_rec_read(fd, c, &e, &buf, &cap) < 0)
            continue;       /* the sweep drops what does not check */
        const struct cache_rec *r = (const struct cache_rec *)buf;
        const char *key = (const char *)(r + 1);
        if ((rc = pix_add(c, txn, hash, key, r->key_len, key + r->key_len, r->hdr_len)) != 0)
            break;
        (*nrows)++;
    }
    mdb_cursor_close(cur);
    free(buf);
    return rc == MDB_NOTFOUND ? 0 : rc;
}

/*
 * See cache-int.h.
 */
int
cache_pix_upgrade(struct cache *c, int fd)
{
    MDB_val k = { sizeof(pix_meta_key) - 1, (void *)(uintptr_t)pix_meta_key }, v;
    MDB_txn *txn;
    uint32_t ver = PIX_VERSION;
    size_t nrows = 0;
    int rc;

    if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
        goto fail;
    rc = mdb_get(txn, c->dbi_meta, &k, &v);
    if (rc == 0 && v.mv_size == sizeof(ver) && memcmp(v.mv_data, &ver, sizeof(ver)) == 0) {
        mdb_txn_abort(txn);
        return CACHE_OK;
    }
    if ((rc = mdb_drop(txn, c->dbi_tag, 0)) != 0 || (rc = mdb_drop(txn, c->dbi_key, 0)) != 0
        || (rc = mdb_drop(txn, c->dbi_rev, 0)) != 0 || (rc = pix_fill_all(c, fd, txn, &nrows)) != 0)
        goto abort;
    v.mv_size = sizeof(ver);
    v.mv_data = &ver;
    if ((rc = mdb_put(txn, c->dbi_meta, &k, &v, 0)) != 0)
        goto abort;
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    if (nrows)
        cache_log_info("cache: purge tables (version %u) built for %zu stored objects",
                       PIX_VERSION, nrows);
    return CACHE_OK;
abort:
    mdb_txn_abort(txn);
fail:
    cache_log_warn("cache: building the purge tables: %s (tag and prefix purges may miss "
                   "objects stored before this version)", mdb_strerror(rc));
    return CACHE_ERROR;
}

/* See cache-int.h. */
uint64_t
cache_pix_pages(struct cache *c, MDB_txn *txn)
{
    MDB_dbi dbi[3] = { c->dbi_tag, c->dbi_key, c->dbi_rev };
    MDB_stat st;
    uint64_t n = 0;

    for (int i = 0; i < 3; i++)
        if (mdb_stat(txn, dbi[i], &st) == 0)
            n += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
    return n;
}

/*
 * See cache-int.h.  The index's last resort (it is full of live entries)
 * deletes runs of entries: in obj's order a run frees obj's and prev's
 * leaves, but its keys are scattered over pkey, whose leaves then never
 * empty; so every other run is taken in pkey's order (from where the last
 * one stopped).  Returns the number of victims (read txn, copied out).
 */
int
cache_pix_run(struct cache *c, int max, uint8_t (*hash)[16], uint64_t *off)
{
    MDB_cursor *cur = NULL;
    MDB_val k, v, ok, ov;
    struct cache_ent e;
    int n = 0, rc;

    if (mdb_txn_renew(c->rtxn) != 0)
        return 0;
    if (mdb_cursor_open(c->rtxn, c->dbi_key, &cur) != 0)
        goto out;
    k.mv_size = c->pix_resume_len;
    k.mv_data = c->pix_resume;
    rc = mdb_cursor_get(cur, &k, &v, c->pix_resume_len ? MDB_SET_RANGE : MDB_FIRST);
    if (rc == MDB_NOTFOUND)
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    for (; rc == 0 && n < max; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
        if (v.mv_size != 16)
            continue;
        ok.mv_size = 16;
        ok.mv_data = v.mv_data;
        if (mdb_get(c->rtxn, c->dbi_obj, &ok, &ov) != 0 || ov.mv_size != sizeof(e))
            continue;
        memcpy(&e, ov.mv_data, sizeof(e));
        memcpy(hash[n], v.mv_data, 16);
        off[n++] = e.off;
    }
    c->pix_resume_len = 0;
    if (rc == 0 && k.mv_size <= sizeof(c->pix_resume)) {
        memcpy(c->pix_resume, k.mv_data, k.mv_size);
        c->pix_resume_len = k.mv_size;
    }
out:
    if (cur)
        mdb_cursor_close(cur);
    mdb_txn_reset(c->rtxn);
    return n;
}
