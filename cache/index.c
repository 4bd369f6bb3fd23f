/*
 * cache/index.c: the LMDB index.
 *
 * One env per process, opened after fork (cache_open or the prepare
 * child), with MDB_NOTLS (our read txn is a plain object, not bound to a
 * thread), MDB_NOSYNC without MDB_WRITEMAP (a process crash loses nothing
 * committed; the cache manager syncs on a timer; a machine crash may lose
 * the last commits, which the unclean-shutdown check covers) and
 * MDB_NORDAHEAD (lookups are random).  Named DBs:
 *     obj   16-byte key hash -> struct cache_ent
 *     meta  "ring" -> struct cache_ringmeta (cur_seg, head, floor, store id),
 *           "pix" -> the version of the purge tables
 *     ptag, pkey, prev  the purge tables (purge.c), changed in the same
 *           txn as every obj put and delete
 * The ring meta is rewritten in the same txn as every entry put, with the
 * shared head read inside the txn: LMDB serialises writers, the shared
 * head only grows, so the persisted head always covers every persisted
 * entry.
 *
 * Reads: one read txn per process, created once, renewed for each lookup
 * and reset before returning, so no snapshot outlives a call (a held
 * snapshot stops LMDB from reusing pages).  Values are copied out (they
 * are only 2-byte aligned in the map, and are 72 bytes).
 *
 * Space: the map size is fixed (FORMAT.md).  The manager raises the ring
 * floor when the obj DB passes CACHE_IDX_HIGH of the map, and the sweep
 * deletes entries below it.  MDB_MAP_FULL in a writer is the backstop:
 * abort, evict a batch right there, retry once, else report CACHE_FULL.
 * Never fatal.
 *
 * Sweeps never hold LMDB's writer lock while reading the ring: a read
 * phase decides (and checksums, when entries need verification), a short
 * write phase applies the decisions to entries that did not change since.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache-int.h"

#define CACHE_IDX_HIGH_PERMILLE 700     /* manager evicts above 70% of the map */
#define CACHE_IDX_FULL_PERMILLE 850     /* writers evict above 85% */
#define CACHE_IDX_SLACK 24              /* pages: see index_usage() */
#define SWEEP_MAX   256                 /* decisions per sweep batch */
#define SWEEP_VERIFY_BYTES (32u << 20)  /* checksummed bytes per batch: ~5 ms */

static const char ring_key[] = "ring";

enum sweep_act { ACT_DEL = 1, ACT_TOUCH = 2 };

struct sweep_dec {
    uint8_t  hash[16];
    uint64_t off;
    int      act;
};

static int index_usage(struct cache *c);

static void
index_path(const char *dir, char *buf, size_t len)
{
    snprintf(buf, len, "%s/index", dir);
}

int
cache_index_wipe(const char *dir)
{
    char p[4096], f[4200];
    int rc = 0;

    index_path(dir, p, sizeof(p));
    snprintf(f, sizeof(f), "%s/data.mdb", p);
    if (unlink(f) < 0 && errno != ENOENT)
        rc = -1;
    snprintf(f, sizeof(f), "%s/lock.mdb", p);
    if (unlink(f) < 0 && errno != ENOENT)
        rc = -1;
    return rc;
}


/* Index writes that fail keep failing (a full or failing disk): log the
 * first with its likely cause, then at most one summary line every 10 s
 * per process, instead of one line per request. */
static void
index_write_error(const struct cache *c, const char *what, int rc)
{
    static time_t window;
    static unsigned suppressed;
    time_t now = time(NULL);
    struct statvfs sv;
    const char *cause = "";

    if (now < window + 10) {
        suppressed++;
        return;
    }
    if (c->dir && statvfs(c->dir, &sv) == 0 && sv.f_bavail * sv.f_frsize < 1024 * 1024)
        cause = " (the store's filesystem is full)";
    if (suppressed)
        cache_log_error("cache: %s: %s%s; %u more index write errors in the last %ld s",
                        what, mdb_strerror(rc), cause, suppressed, (long)(now - window));
    else
        cache_log_error("cache: %s: %s%s", what, mdb_strerror(rc), cause);
    window = now;
    suppressed = 0;
}

/*
 * Open the env and DBs (creating them when create) and the reusable read
 * txn.  Returns CACHE_OK, or CACHE_ERROR with err set; LMDB's own codes
 * for a damaged file are reported as CACHE_ERROR too (the prepare child
 * wipes and retries).
 */
int
cache_index_open(struct cache *c, int create, char *err, size_t errlen)
{
    char path[4096];
    MDB_txn *txn = NULL;
    int rc;
    unsigned maxr = c->shm ? c->shm->nslots * 2 + 16 : 64;

    index_path(c->dir, path, sizeof(path));
    if (create && mkdir(path, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", path, strerror(errno));
        return CACHE_ERROR;
    }
    if ((rc = mdb_env_create(&c->env)) != 0)
        goto fail;
    if ((rc = mdb_env_set_maxdbs(c->env, 5)) != 0
        || (rc = mdb_env_set_mapsize(c->env, c->g.mapsize)) != 0
        || (rc = mdb_env_set_maxreaders(c->env, maxr)) != 0)
        goto fail;
    rc = mdb_env_open(c->env, path, MDB_NOTLS | MDB_NOSYNC | MDB_NORDAHEAD, 0600);
    if (rc != 0)
        goto fail;
    if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
        goto fail;
    if ((rc = mdb_dbi_open(txn, "obj", MDB_CREATE, &c->dbi_obj)) != 0
        || (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &c->dbi_meta)) != 0
        || (rc = cache_pix_open(c, txn)) != 0)
        goto fail;
    rc = mdb_txn_commit(txn);
    txn = NULL;
    if (rc != 0)
        goto fail;
    if ((rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &c->rtxn)) != 0)
        goto fail;
    mdb_txn_reset(c->rtxn);
    return CACHE_OK;

fail:
    snprintf(err, errlen, "index %s: %s", path, mdb_strerror(rc));
    if (txn)
        mdb_txn_abort(txn);
    if (c->env)
        mdb_env_close(c->env);
    c->env = NULL;
    c->rtxn = NULL;
    return CACHE_ERROR;
}

void
cache_index_close(struct cache *c)
{
    if (c->rtxn)
        mdb_txn_abort(c->rtxn);
    c->rtxn = NULL;
    if (c->env)
        mdb_env_close(c->env);
    c->env = NULL;
}

int
cache_ent_valid(const struct cache_ent *e)
{
    return e->magic == CACHE_ENT_MAGIC && e->version == CACHE_ENT_VERSION
           && (e->type == CACHE_ENT_OBJECT || e->type == CACHE_ENT_VARIANTS)
           && e->rec_len >= CACHE_REC_SIZE && e->rec_len % CACHE_REC_ALIGN == 0;
}

/* Renew the read txn; on failure it stays reset. */
static int
rtxn_renew(struct cache *c)
{
    int rc = mdb_txn_renew(c->rtxn);
    if (rc != 0) {
        cache_log_error("cache: mdb_txn_renew: %s", mdb_strerror(rc));
        return CACHE_ERROR;
    }
    return CACHE_OK;
}

/*
 * Copy the entry for hash into *e.  Returns CACHE_OK, CACHE_MISS (absent
 * or not a valid entry struct), CACHE_ERROR.
 */
int
cache_index_get(struct cache *c, const uint8_t hash[16], struct cache_ent *e)
{
    MDB_val k = { 16, (void *)(uintptr_t)hash }, v;
    int rc;

    if (rtxn_renew(c) != CACHE_OK)
        return CACHE_ERROR;
    rc = mdb_get(c->rtxn, c->dbi_obj, &k, &v);
    if (rc == 0 && v.mv_size == sizeof(*e))
        memcpy(e, v.mv_data, sizeof(*e));
    mdb_txn_reset(c->rtxn);
    if (rc == MDB_NOTFOUND)
        return CACHE_MISS;
    if (rc != 0) {
        cache_log_error("cache: index get: %s", mdb_strerror(rc));
        return CACHE_ERROR;
    }
    if (v.mv_size != sizeof(*e) || !cache_ent_valid(e))
        return CACHE_MISS;
    return CACHE_OK;
}

static void
ringmeta_now(struct cache *c, struct cache_ringmeta *m)
{
    memset(m, 0, sizeof(*m));
    m->magic = CACHE_RINGMETA_MAGIC;
    m->version = 1;
    m->store_id = c->store_id;
    /* Read head before cur_seg: a concurrent entry into a new segment then
     * can only make the pair look older, never ahead of what was written. */
    m->head = __atomic_load_n(&c->shm->head, __ATOMIC_SEQ_CST);
    m->cur_seg = __atomic_load_n(&c->shm->cur_seg, __ATOMIC_SEQ_CST);
    if (m->head < m->cur_seg * c->g.seg_size)
        m->head = m->cur_seg * c->g.seg_size;
    if (m->head > (m->cur_seg + 1) * c->g.seg_size)
        m->head = (m->cur_seg + 1) * c->g.seg_size;
    m->floor = __atomic_load_n(&c->shm->floor, __ATOMIC_SEQ_CST);
}

static int
put_ringmeta(struct cache *c, MDB_txn *txn)
{
    struct cache_ringmeta m;
    MDB_val k = { sizeof(ring_key) - 1, (void *)(uintptr_t)ring_key };
    MDB_val v = { sizeof(m), &m };

    ringmeta_now(c, &m);
    return mdb_put(txn, c->dbi_meta, &k, &v, 0);
}

/*
 * Load the persisted ring position.  Returns CACHE_OK, CACHE_MISS (none or
 * not this store's), CACHE_ERROR.
 */
int
cache_index_load_ring(struct cache *c, struct cache_ringmeta *m)
{
    MDB_val k = { sizeof(ring_key) - 1, (void *)(uintptr_t)ring_key }, v;
    int rc;

    if (rtxn_renew(c) != CACHE_OK)
        return CACHE_ERROR;
    rc = mdb_get(c->rtxn, c->dbi_meta, &k, &v);
    if (rc == 0 && v.mv_size == sizeof(*m))
        memcpy(m, v.mv_data, sizeof(*m));
    mdb_txn_reset(c->rtxn);
    if (rc == MDB_NOTFOUND)
        return CACHE_MISS;
    if (rc != 0)
        return CACHE_ERROR;
    if (v.mv_size != sizeof(*m) || m->magic != CACHE_RINGMETA_MAGIC || m->version != 1
        || m->store_id != c->store_id || m->head < m->cur_seg * c->g.seg_size
        || m->head > (m->cur_seg + 1) * c->g.seg_size)
        return CACHE_MISS;
    return CACHE_OK;
}

/* Persist the ring position on its own.  Returns CACHE_OK, CACHE_FULL,
 * CACHE_ERROR. */
int
cache_index_save_ring(struct cache *c)
{
    MDB_txn *txn;
    int rc;

    if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
        goto fail;
    if ((rc = put_ringmeta(c, txn)) != 0) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    return CACHE_OK;
fail:
    if (rc != MDB_MAP_FULL)
        cache_log_error("cache: saving ring position: %s", mdb_strerror(rc));
    return rc == MDB_MAP_FULL ? CACHE_FULL : CACHE_ERROR;
}

/*
 * Store e under hash (with the ring position).  With expect_body, only
 * while the stored entry is a valid OBJECT entry whose body record is at
 * *expect_body (compare-and-swap inside the write txn: a header refresh
 * must not resurrect a removed object nor land on a body filled since).
 * *replaced (if not NULL) says whether an entry was there.  Returns
 * CACHE_OK, CACHE_MISS (condition failed), CACHE_FULL (the map stayed full
 * after two evictions), CACHE_ERROR.
 */
static int
index_put(struct cache *c, const uint8_t hash[16], const struct cache_ent *e,
          int *replaced, const uint64_t *expect_body)
{
    MDB_val k = { 16, (void *)(uintptr_t)hash }, v, old;
    MDB_txn *txn;
    struct cache_ent cur;
    int rc;

    /* Second line behind the manager's high-water eviction: a burst of
     * fills between two ticks must not run the map to its last page, where
     * even a delete cannot get the pages it copies (LMDB is copy-on-write). */
    /* Every put once the map is past the manager's mark: a put writes four
     * trees (obj and the purge tables), and a map run to its last pages
     * cannot even delete. */
    if (++c->puts % 16 == 0 || c->idx_usage >= CACHE_IDX_HIGH_PERMILLE) {
        c->idx_usage = index_usage(c);
        if (c->idx_usage >= CACHE_IDX_FULL_PERMILLE) {
            cache_index_evict(c);
            c->idx_usage = index_usage(c);
        }
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
            break;
        rc = mdb_get(txn, c->dbi_obj, &k, &old);
        if (replaced)
            *replaced = rc == 0;
        if (expect_body) {
            if (rc == 0 && old.mv_size == sizeof(cur))
                memcpy(&cur, old.mv_data, sizeof(cur));
            if (rc != 0 || old.mv_size != sizeof(cur) || !cache_ent_valid(&cur)
                || cur.type != CACHE_ENT_OBJECT || cur.body_off != *expect_body) {
                mdb_txn_abort(txn);
                if (rc != 0 && rc != MDB_NOTFOUND)
                    break;
                return CACHE_MISS;
            }
        }
        v.mv_size = sizeof(*e);
        v.mv_data = (void *)(uintptr_t)e;
        rc = mdb_put(txn, c->dbi_obj, &k, &v, 0);
        if (rc == 0)
            rc = cache_pix_set(c, txn, hash, e);
        if (rc == 0)
            rc = put_ringmeta(c, txn);
        if (rc != 0) {
            mdb_txn_abort(txn);
        } else {
            rc = mdb_txn_commit(txn);
            if (rc == 0)
                return CACHE_OK;
        }
        if (rc != MDB_MAP_FULL)
            break;
        if (attempt == 0)
            cache_log_info("cache: index map full; evicting");
        cache_index_evict(c);
    }
    if (rc == MDB_MAP_FULL)
        return CACHE_FULL;
    index_write_error(c, "index put", rc);
    return CACHE_ERROR;
}

int
cache_index_put(struct cache *c, const uint8_t hash[16], const struct cache_ent *e,
                int *replaced)
{
    return index_put(c, hash, e, replaced, NULL);
}

/* Put e only while the entry for hash still serves the body record at
 * body_off (see index_put).  CACHE_OK, CACHE_MISS, CACHE_FULL, CACHE_ERROR. */
int
cache_index_put_if(struct cache *c, const uint8_t hash[16], const struct cache_ent *e,
                   uint64_t body_off)
{
    return index_put(c, hash, e, NULL, &body_off);
}

/*
 * Relocation batch (S3-FIFO eviction, evict.c): in one write txn, replace
 * each sw[i].hash's entry by sw[i].ne only while it is still the version
 * the relocation copied, i.e. a valid OBJECT entry with the same off and
 * body_off (a fill, a header refresh or a removal since then makes the
 * swap a no-op: a relocation never resurrects a removed object, never
 * undoes a refresh, never replaces a newer body).  Sets sw[i].done.  The
 * ring record goes in the same txn, as with every put.  Returns the number
 * swapped, CACHE_FULL or CACHE_ERROR (then nothing was swapped).
 */
int
cache_index_swap(struct cache *c, struct cache_swap *sw, int n)
{
    MDB_txn *txn;
    MDB_val k, v;
    struct cache_ent cur;
    int rc = 0, done;

    for (int attempt = 0; attempt < 2; attempt++) {
        done = 0;
        for (int i = 0; i < n; i++)
            sw[i].done = 0;
        if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
            break;
        for (int i = 0; i < n && rc == 0; i++) {
            k.mv_size = 16;
            k.mv_data = sw[i].hash;
            rc = mdb_get(txn, c->dbi_obj, &k, &v);
            if (rc == MDB_NOTFOUND) {
                rc = 0;
                continue;
            }
            if (rc != 0 || v.mv_size != sizeof(cur))
                continue;
            memcpy(&cur, v.mv_data, sizeof(cur));
            if (!cache_ent_valid(&cur) || cur.type != CACHE_ENT_OBJECT
                || cur.off != sw[i].old_off || cur.body_off != sw[i].old_body_off)
                continue;
            /* a soft purge lowered the entry's expiry: the copy keeps it */
            if (cur.expires < sw[i].ne.expires)
                sw[i].ne.expires = cur.expires;
            v.mv_size = sizeof(sw[i].ne);
            v.mv_data = &sw[i].ne;
            if ((rc = mdb_put(txn, c->dbi_obj, &k, &v, 0)) == 0) {
                sw[i].done = 1;
                done++;
            }
        }
        if (rc == 0)
            rc = put_ringmeta(c, txn);
        if (rc != 0) {
            mdb_txn_abort(txn);
        } else if ((rc = mdb_txn_commit(txn)) == 0) {
            return done;
        }
        if (rc != MDB_MAP_FULL)
            break;
        cache_index_evict(c);
    }
    for (int i = 0; i < n; i++)
        sw[i].done = 0;
    if (rc == MDB_MAP_FULL)
        return CACHE_FULL;
    index_write_error(c, "relocation put", rc);
    return CACHE_ERROR;
}

/*
 * Delete the entry for hash; when only_if is given, only if the stored
 * entry still points at only_if->off (it was not replaced meanwhile).
 * Returns CACHE_OK, CACHE_MISS, CACHE_ERROR.
 */
int
cache_index_del(struct cache *c, const uint8_t hash[16], const struct cache_ent *only_if)
{
    MDB_val k = { 16, (void *)(uintptr_t)hash }, v;
    MDB_txn *txn;
    struct cache_ent cur;
    int rc;

    if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
        goto fail;
    rc = mdb_get(txn, c->dbi_obj, &k, &v);
    if (rc == MDB_NOTFOUND) {
        mdb_txn_abort(txn);
        return CACHE_MISS;
    }
    if (rc == 0 && only_if) {
        if (v.mv_size == sizeof(cur))
            memcpy(&cur, v.mv_data, sizeof(cur));
        if (v.mv_size == sizeof(cur) && cur.off != only_if->off) {
            mdb_txn_abort(txn);
            return CACHE_MISS;
        }
    }
    if (rc == 0)
        rc = mdb_del(txn, c->dbi_obj, &k, NULL);
    if (rc == 0)
        rc = cache_pix_forget(c, txn, hash);
    if (rc != 0) {
        mdb_txn_abort(txn);
        goto fail;
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    return CACHE_OK;
fail:
    index_write_error(c, "index delete", rc);
    return CACHE_ERROR;
}

/* Apply sweep decisions in one short write txn.  Returns entries deleted,
 * CACHE_FULL (even deleting needs pages: LMDB copies on write), or
 * CACHE_ERROR. */
static int
sweep_apply(struct cache *c, const struct sweep_dec *d, int n)
{
    MDB_txn *txn;
    MDB_val k, v;
    struct cache_ent e;
    int rc, deleted = 0;

    if (n == 0)
        return 0;
    if ((rc = mdb_txn_begin(c->env, NULL, 0, &txn)) != 0)
        goto fail;
    for (int i = 0; i < n; i++) {
        k.mv_size = 16;
        k.mv_data = (void *)(uintptr_t)d[i].hash;
        if (mdb_get(txn, c->dbi_obj, &k, &v) != 0)
            continue;
        if (v.mv_size == sizeof(e)) {
            memcpy(&e, v.mv_data, sizeof(e));
            if (e.off != d[i].off)
                continue;       /* replaced since we looked */
        }
        if (d[i].act == ACT_DEL || v.mv_size != sizeof(e)) {
            rc = mdb_del(txn, c->dbi_obj, &k, NULL);
            if (rc == 0)
                rc = cache_pix_forget(c, txn, d[i].hash);
            if (rc == 0)
                deleted++;
        } else {
            e.epoch = c->epoch;
            v.mv_size = sizeof(e);
            v.mv_data = &e;
            rc = mdb_put(txn, c->dbi_obj, &k, &v, 0);
        }
        if (rc != 0 && rc != MDB_NOTFOUND) {
            mdb_txn_abort(txn);
            goto fail;
        }
    }
    if ((rc = mdb_txn_commit(txn)) != 0)
        goto fail;
    CTR_ADD(c, evictions, (uint64_t)deleted);
    return deleted;
fail:
    if (rc == MDB_MAP_FULL)
        return CACHE_FULL;
    cache_log_error("cache: sweep: %s", mdb_strerror(rc));
    return CACHE_ERROR;
}

/*
 * Read phase of a sweep: from the resume key, look at up to `budget`
 * entries and decide.  `random_evict` > 0 (index full of live entries)
 * also deletes that many live ones.  Returns the number of decisions.
 */
static int
sweep_scan(struct cache *c, int budget, int random_evict, struct sweep_dec *d)
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    struct cache_ent e;
    uint64_t verified = 0;
    uint32_t trust = __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_SEQ_CST);
    int n = 0, rc, seen = 0;

    if (rtxn_renew(c) != CACHE_OK)
        return 0;
    if (mdb_cursor_open(c->rtxn, c->dbi_obj, &cur) != 0)
        goto out;
    if (c->sweep_have_key) {
        k.mv_size = 16;
        k.mv_data = c->sweep_key;
        rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
    } else {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
    }
    while (rc == 0 && seen < budget && n < SWEEP_MAX) {
        int act = 0;

        seen++;
        if (k.mv_size != 16 || v.mv_size != sizeof(e)) {
            act = ACT_DEL;
            memset(&e, 0, sizeof(e));
        } else {
            memcpy(&e, v.mv_data, sizeof(e));
            /* Lapped if either record is: a refreshed entry's header and
             * body records (off, body_off) may sit in different segments. */
            if (!cache_ent_valid(&e) || !cache_ring_alive(c->shm, e.off)
                || !cache_ring_alive(c->shm, e.body_off)) {
                act = ACT_DEL;
            } else if (e.epoch < trust && verified < SWEEP_VERIFY_BYTES) {
                const struct cache_rec *h, *b;

                /* Pin, then re-check alive (Dekker, ring.c): verify only
                 * bytes no writer can be rewriting. */
                if (cache_ent_pin(c, &e) < 0)
                    act = ACT_DEL;
                else {
                    act = cache_ent_verify(c, &e, k.mv_data, NULL, 0, 1, &h, &b) == 0
                          ? ACT_TOUCH : ACT_DEL;
                    cache_ent_unpin(c, &e);
                }
                verified += e.rec_len + e.body_len;
            } else if (random_evict > 0) {
                act = ACT_DEL;
                random_evict--;
            }
        }
        if (act && k.mv_size == 16) {
            memcpy(d[n].hash, k.mv_data, 16);
            d[n].off = e.off;
            d[n].act = act;
            n++;
        }
        rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
    }
    if (rc == 0 && k.mv_size == 16) {
        memcpy(c->sweep_key, k.mv_data, 16);
        c->sweep_have_key = 1;
    } else {
        c->sweep_have_key = 0;      /* wrapped: next batch starts over */
    }
out:
    if (cur)
        mdb_cursor_close(cur);
    mdb_txn_reset(c->rtxn);
    return n;
}

/*
 * One sweep batch over at most budget entries: drop entries that are
 * lapped, below the floor or damaged; verify (and re-stamp) entries from
 * before an unclean shutdown.  Returns entries deleted or CACHE_ERROR.
 */
int
cache_index_sweep(struct cache *c, int budget)
{
    struct sweep_dec d[SWEEP_MAX];
    int n = sweep_scan(c, budget, 0, d);

    return sweep_apply(c, d, n);
}

/* Permille of the map used by the obj DB's and the purge tables' pages
 * (and slack). */
static int
index_usage(struct cache *c)
{
    MDB_stat st;
    MDB_envinfo info;
    uint64_t used, total, pix;

    if (rtxn_renew(c) != CACHE_OK)
        return 0;
    if (mdb_stat(c->rtxn, c->dbi_obj, &st) != 0) {
        mdb_txn_reset(c->rtxn);
        return 0;
    }
    pix = cache_pix_pages(c, c->rtxn);
    mdb_txn_reset(c->rtxn);
    if (mdb_env_info(c->env, &info) != 0 || st.ms_psize == 0)
        return 0;
    /* Plus a fixed slack: LMDB's own trees and the pages of the last two
     * snapshots (not reusable yet) also live in the map, and matter in
     * small maps. */
    used = st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages + pix + CACHE_IDX_SLACK;
    total = info.me_mapsize / st.ms_psize;
    return total ? (int)(used * 1000 / total) : 0;
}

/* Raise the floor by an eighth of the ring (never into cur_seg). */
static void
raise_floor(struct cache *c)
{
    struct cache_shm *s = c->shm;
    uint64_t cur, lo, fl, step = (s->nseg / 8 ? s->nseg / 8 : 1) * s->seg_size;

    if (cache_ring_lock(s) < 0)
        return;
    cur = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST);
    fl = __atomic_load_n(&s->floor, __ATOMIC_SEQ_CST);
    lo = cur + 1 > s->nseg ? (cur + 1 - s->nseg) * s->seg_size : 0;
    if (fl < lo)
        fl = lo;
    fl += step;
    if (fl > cur * s->seg_size)
        fl = cur * s->seg_size;
    if (fl > __atomic_load_n(&s->floor, __ATOMIC_SEQ_CST))
        __atomic_store_n(&s->floor, fl, __ATOMIC_SEQ_CST);
    cache_ring_unlock(s);
}

/*
 * Make index room now (MDB_MAP_FULL backstop, also used at the high-water
 * mark): raise the floor, then delete one batch of dead entries; if the
 * batch found none, delete a quarter of it at random (the map is too small
 * for the ring: every entry is live).  Returns entries deleted,
 * CACHE_FULL or CACHE_ERROR.
 */
int
cache_index_evict(struct cache *c)
{
    struct sweep_dec d[SWEEP_MAX];
    int n;

    raise_floor(c);
    n = sweep_scan(c, SWEEP_MAX, 0, d);
    if (n == 0 && (c->pix_flip++ & 1)) {
        /* a run in the purge key table's order (purge.c: cache_pix_run) */
        uint8_t h[SWEEP_MAX / 4][16];
        uint64_t off[SWEEP_MAX / 4];
        n = cache_pix_run(c, SWEEP_MAX / 4, h, off);
        for (int i = 0; i < n; i++) {
            memcpy(d[i].hash, h[i], 16);
            d[i].off = off[i];
            d[i].act = ACT_DEL;
        }
    }
    if (n == 0)
        n = sweep_scan(c, SWEEP_MAX, SWEEP_MAX / 4, d);
    /* A full map may not even have the pages to copy the leaves a big
     * batch touches: retry with smaller ones. */
    for (int batch = n; batch > 0; batch /= 8) {
        n = sweep_apply(c, d, batch);
        if (n != CACHE_FULL)
            break;
    }
    /* LMDB keeps the previous snapshot: pages freed by the txn above become
     * reusable only after one more commit.  Make it a useful one. */
    if (n > 0)
        cache_index_save_ring(c);
    return n;
}

/* Manager's view: evict when above the high-water mark.  Returns entries
 * deleted or CACHE_ERROR. */
int
cache_index_highwater(struct cache *c)
{
    if (index_usage(c) < CACHE_IDX_HIGH_PERMILLE)
        return 0;
    cache_log_info("cache: index above %d%% of its map; evicting",
                   CACHE_IDX_HIGH_PERMILLE / 10);
    return cache_index_evict(c);
}
