/*
 * cache/store.c: the store's files, and the operations callers use.
 *
 * Files under the store directory:
 *     content      one file: a 4 KiB store header, then nseg segments.
 *                  Preallocated (posix_fallocate); its size is checked with
 *                  fstat before every mmap (a page past EOF is SIGBUS).
 *     index/       the LMDB env (index.c)
 *
 * Lifecycle: cache_store_prepare() (a child of the master) creates,
 * checks and repairs; every process then cache_open()s after fork and
 * maps the whole content file MAP_SHARED.  The first opener after the
 * master created the shared area loads the persisted ring position into
 * it; later openers find it there.
 *
 * Write path (fills): reserve space at the head (ring.c) and pin its
 * segment; copy the key and header block in; append the body; at commit
 * compute the body checksum, write and seal the record header, read it
 * back through the validator, and only then put the index entry.  A fill
 * that dies before commit leaves bytes nobody points at.  Fills of
 * unknown length grow in place while they are the last reservation, and
 * otherwise move to a fresh, twice-as-large reservation (copying what they
 * wrote: at most doubling, so amortised one extra copy); the abandoned
 * extent is marked as a hole.
 *
 * Read path: one LMDB read, pin, check alive against the ring, validate
 * the record (head checksum, place, key, lengths; body checksum when
 * needed), hand out iovecs into the mapping.  No copy, no allocation.
 * After a header refresh an entry names two records, a HEADERS record
 * (off: header block, meta) and the older OBJECT record it links to
 * (body_off: body); a hit pins both segments, checks both alive, validates
 * both, and serves iov[0] from the first and iov[1] from the second.
 * Either lapped or damaged is a miss.
 *
 * Header refresh (a 304, RFC 9111 4.3.4): a HEADERS record written at the
 * head like a fill, checked, then an index put that is a compare-and-swap
 * on the body record; the body is never copied (update_headers).
 *
 * Eviction (S3-FIFO style, FORMAT.md): hits bump a counter in shm; the
 * process whose reservation moves the head into segment A walks segment
 * A + 1 (about to be lapped) and copies its hot, fresh records to the head
 * like fills, then swaps the index entries by compare-and-swap in one txn
 * per batch (evict_*).  At most half a segment per segment.
 *
 * Fill slots are preallocated per process (conf.max_fills); a struct
 * cache_fill belongs to the process that began it and must not cross
 * fork.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache-int.h"

#define FILL_CHUNK   (16u << 10)    /* first extent of an unknown-length fill: most chunked pages fit */
#define DEFAULT_FILLS 256
#define BODY_SEED    0x62646f79ull  /* body_sum seed: fixed, records stand alone */

enum { HDR_DIRTY = 0, HDR_CLEAN = 1, HDR_CHECKING = 2 };

static void
content_path(const char *dir, char *buf, size_t len)
{
    snprintf(buf, len, "%s/content", dir);
}

static int
hdr_read(int fd, struct cache_store_hdr *h)
{
    memset(h, 0, sizeof(*h));
    return pread(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h) ? 0 : -1;
}

/* Why h does not describe a store of geometry g, or NULL if it does. */
static const char *
hdr_mismatch(const struct cache_store_hdr *h, const struct cache_geom *g)
{
    if (h->magic != CACHE_STORE_MAGIC)
        return "no store header";
    if (h->version != CACHE_STORE_VERSION)
        return "another layout version";
    if (h->hsum != cache_store_hdr_sum(h))
        return "damaged store header";
    if (h->seg_size != g->seg_size || h->nseg != g->nseg || h->file_size != g->file_size)
        return "another geometry (size changed)";
    return NULL;
}

static int
hdr_write(int fd, struct cache_store_hdr *h)
{
    uint8_t page[CACHE_HDR_SIZE];

    h->hsum = cache_store_hdr_sum(h);
    memset(page, 0, sizeof(page));
    memcpy(page, h, sizeof(*h));
    if (pwrite(fd, page, sizeof(page), 0) != (ssize_t)sizeof(page))
        return -1;
    return fdatasync(fd);
}

/* ------------------------------------------------------------------ */
/* Prepare (short-lived child of the master) */

/* Walk every index entry: reads every page, so a damaged index fails here
 * (or crashes this child, which the HDR_CHECKING mark turns into a wipe on
 * the next attempt) rather than in a worker. */
static int
index_walk(struct cache *c)
{
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    int rc;

    if (mdb_txn_renew(c->rtxn) != 0)
        return -1;
    rc = mdb_cursor_open(c->rtxn, c->dbi_obj, &cur);
    if (rc == 0) {
        rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        while (rc == 0)
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        mdb_cursor_close(cur);
    }
    mdb_txn_reset(c->rtxn);
    return rc == MDB_NOTFOUND ? 0 : -1;
}

static int
index_entries(struct cache *c, size_t *n)
{
    MDB_stat st;
    int rc;

    memset(&st, 0, sizeof(st));
    if (mdb_txn_renew(c->rtxn) != 0)
        return -1;
    rc = mdb_stat(c->rtxn, c->dbi_obj, &st);
    mdb_txn_reset(c->rtxn);
    *n = st.ms_entries;
    return rc == 0 ? 0 : -1;
}

/*
 * Open the index of store `c` and make sure it belongs to it: a damaged
 * env, or entries without this store's ring record, are wiped.
 */
static int
prepare_index(struct cache *c, int wipe, char *err, size_t errlen)
{
    struct cache_ringmeta m;
    size_t n;

    for (int attempt = 0; attempt < 2; attempt++) {
        if (wipe) {
            if (cache_index_wipe(c->dir) < 0) {
                snprintf(err, errlen, "cannot remove the old index under %s: %s",
                         c->dir, strerror(errno));
                return -1;
            }
        }
        if (cache_index_open(c, 1, err, errlen) != CACHE_OK) {
            cache_log_warn("cache: %s; rebuilding an empty index", err);
            wipe = 1;
            continue;
        }
        if (cache_index_load_ring(c, &m) == CACHE_OK)
            return 0;
        if (index_entries(c, &n) == 0 && n == 0)
            return 0;
        cache_log_warn("cache: index under %s does not belong to this store; "
                       "starting with an empty index", c->dir);
        cache_index_close(c);
        wipe = 1;
    }
    return -1;
}

/*
 * See cache.h.
 */
int
cache_store_prepare(const struct cache_conf *cf, char *err, size_t errlen)
{
    struct cache c;
    struct cache_store_hdr h;
    struct stat st;
    char path[4096];
    const char *why = NULL;
    int fd = -1, fresh = 0, rc;

    memset(&c, 0, sizeof(c));
    if (cache_geom_compute(cf, &c.g) < 0) {
        snprintf(err, errlen, "storage size %lld is too small for a cache",
                 (long long)(cf ? cf->size : 0));
        return CACHE_ERROR;
    }
    c.dir = (char *)(uintptr_t)cf->dir;
    if (mkdir(cf->dir, 0700) < 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", cf->dir, strerror(errno));
        return CACHE_ERROR;
    }
    content_path(cf->dir, path, sizeof(path));
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (hdr_read(fd, &h) < 0 || (why = hdr_mismatch(&h, &c.g)) != NULL) {
        if (st.st_size > 0)
            cache_log_warn("cache: %s: %s; re-initialising the store", path,
                           why ? why : "short store header");
        fresh = 1;
        if (ftruncate(fd, 0) < 0) {
            snprintf(err, errlen, "%s: truncate: %s", path, strerror(errno));
            goto fail;
        }
        memset(&h, 0, sizeof(h));
        h.magic = CACHE_STORE_MAGIC;
        h.version = CACHE_STORE_VERSION;
        h.seg_size = c.g.seg_size;
        h.nseg = c.g.nseg;
        h.file_size = c.g.file_size;
        while (h.store_id == 0)
            if (getrandom(&h.store_id, sizeof(h.store_id), 0) != sizeof(h.store_id)) {
                snprintf(err, errlen, "getrandom: %s", strerror(errno));
                goto fail;
            }
        h.clean = HDR_CLEAN;
    } else if ((uint64_t)st.st_size != c.g.file_size) {
        cache_log_warn("cache: %s is %lld bytes, expected %llu; repairing (records in "
                       "the lost part will be dropped)", path, (long long)st.st_size,
                       (unsigned long long)c.g.file_size);
        if ((uint64_t)st.st_size > c.g.file_size && ftruncate(fd, (off_t)c.g.file_size) < 0) {
            snprintf(err, errlen, "%s: truncate: %s", path, strerror(errno));
            goto fail;
        }
    }
    /* Always: cheap when already allocated, and it fills holes left by a
     * truncation (they read as zeros, which no record validates as). */
    rc = posix_fallocate(fd, 0, (off_t)c.g.file_size);
    if (rc != 0) {
        snprintf(err, errlen, "%s: preallocating %llu bytes: %s", path,
                 (unsigned long long)c.g.file_size, strerror(rc));
        goto fail;
    }
    c.store_id = h.store_id;
    if (prepare_index(&c, fresh || h.clean == HDR_CHECKING, err, errlen) < 0)
        goto fail;
    if (!fresh && h.clean != HDR_CLEAN) {
        cache_log_warn("cache: %s was not shut down cleanly; checking the index, and "
                       "verifying objects before they are served", cf->dir);
        h.clean = HDR_CHECKING;
        if (hdr_write(fd, &h) < 0 || index_walk(&c) < 0) {
            cache_log_warn("cache: index under %s is damaged; starting with an empty "
                           "index", cf->dir);
            cache_index_close(&c);
            if (prepare_index(&c, 1, err, errlen) < 0)
                goto fail;
        }
    }
    /* Every start distrusts the bodies written before it, clean or not: a
     * content file can be damaged while we are stopped (disk, operator),
     * and only the body checksum would notice.  Hits verify an untrusted
     * body once, and the manager's sweep verifies the rest in the
     * background; the index itself is trusted after a clean stop, so
     * there is still no loading scan. */
    h.trust_epoch = h.epoch + 1;
    h.epoch++;
    h.clean = HDR_DIRTY;
    if (hdr_write(fd, &h) < 0) {
        snprintf(err, errlen, "%s: writing the store header: %s", path, strerror(errno));
        goto fail;
    }
    if (mdb_env_sync(c.env, 1) != 0)
        cache_log_warn("cache: index sync failed");
    cache_index_close(&c);
    close(fd);
    return CACHE_OK;

fail:
    cache_index_close(&c);
    if (fd >= 0)
        close(fd);
    return CACHE_ERROR;
}

/* ------------------------------------------------------------------ */
/* Open / close */

/* Install the persisted ring position in the shared area, once per store. */
static int
ring_load(struct cache *c, const struct cache_store_hdr *h)
{
    struct cache_shm *s = c->shm;
    struct cache_ringmeta m;
    int rc = CACHE_OK;

    if (cache_ring_lock(s) < 0)
        return CACHE_ERROR;
    if (__atomic_load_n(&s->store_id, __ATOMIC_SEQ_CST) != c->store_id) {
        int got = cache_index_load_ring(c, &m);
        if (got == CACHE_ERROR) {
            rc = CACHE_ERROR;
        } else {
            if (got == CACHE_MISS)
                memset(&m, 0, sizeof(m));
            __atomic_store_n(&s->cur_seg, m.cur_seg, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->head, m.head, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->floor, m.floor, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->epoch, h->epoch, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->trust_epoch, h->trust_epoch, __ATOMIC_SEQ_CST);
            __atomic_store_n(&s->store_id, c->store_id, __ATOMIC_SEQ_CST);
        }
    }
    cache_ring_unlock(s);
    return rc;
}

/*
 * See cache.h.
 */
struct cache *
cache_open(const struct cache_conf *cf, void *shm_area, int slot, char *err,
           size_t errlen)
{
    struct cache *c;
    struct cache_store_hdr h;
    struct stat st;
    char path[4096];
    const char *why = NULL;
    void *m;

    if ((c = calloc(1, sizeof(*c))) == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->magic = CACHE_MAGIC;
    c->fd = -1;
    c->slot = slot;
    if (cache_geom_compute(cf, &c->g) < 0) {
        snprintf(err, errlen, "storage size too small for a cache");
        goto fail;
    }
    c->shm = cache_shm_get(shm_area);
    if (c->shm == NULL || c->shm->seg_size != c->g.seg_size || c->shm->nseg != c->g.nseg
        || slot < 0 || (uint32_t)slot >= c->shm->nslots) {
        snprintf(err, errlen, "cache shared area missing or laid out for another store");
        goto fail;
    }
    c->conf = *cf;
    if ((c->dir = strdup(cf->dir)) == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->conf.dir = c->dir;
    content_path(c->dir, path, sizeof(path));
    if ((c->fd = open(path, O_RDWR | O_CLOEXEC)) < 0 || fstat(c->fd, &st) < 0) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    if (hdr_read(c->fd, &h) < 0 || (why = hdr_mismatch(&h, &c->g)) != NULL) {
        snprintf(err, errlen, "%s: %s (store not prepared)", path,
                 h.magic ? why : "no store header");
        goto fail;
    }
    if ((uint64_t)st.st_size != c->g.file_size) {
        snprintf(err, errlen, "%s: size %lld, expected %llu (store not prepared)", path,
                 (long long)st.st_size, (unsigned long long)c->g.file_size);
        goto fail;
    }
    m = mmap(NULL, c->g.file_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->fd, 0);
    if (m == MAP_FAILED) {
        snprintf(err, errlen, "mmap %s: %s", path, strerror(errno));
        goto fail;
    }
    c->map = m;
    c->maplen = c->g.file_size;
    c->ring = c->map + CACHE_HDR_SIZE;
    c->store_id = h.store_id;
    c->epoch = h.epoch;
    c->ctr = cache_slot_counters(c->shm, slot);
    c->mypins = cache_slot_pins(c->shm, slot);
    c->nfills = cf->max_fills > 0 ? cf->max_fills : DEFAULT_FILLS;
    c->pincount = calloc(c->g.nseg, sizeof(*c->pincount));
    c->fills = calloc((size_t)c->nfills, sizeof(*c->fills));
    if (c->pincount == NULL || c->fills == NULL) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    c->max_doc = c->g.seg_size - cache_rec_total(0, 0, 0);
    if (cf->max_doc_size > 0 && (uint64_t)cf->max_doc_size < c->max_doc)
        c->max_doc = (uint64_t)cf->max_doc_size;
    if (cache_index_open(c, 0, err, errlen) != CACHE_OK)
        goto fail;
    if (ring_load(c, &h) != CACHE_OK) {
        snprintf(err, errlen, "cannot load the ring position");
        goto fail;
    }
    return c;

fail:
    cache_close(c);
    return NULL;
}

/*
 * See cache.h.
 */
void
cache_close(struct cache *c)
{
    if (c == NULL)
        return;
    assert(c->magic == CACHE_MAGIC);
    for (int i = 0; c->fills && i < c->nfills; i++)
        if (c->fills[i].state != FILL_FREE)
            cache_fill_abort(&c->fills[i]);
    cache_index_close(c);
    /* Pins still held by forgotten objects die with the process's counts. */
    if (c->pincount && c->mypins)
        for (uint32_t i = 0; i < c->shm->pin_words; i++)
            __atomic_store_n(&c->mypins[i], 0, __ATOMIC_SEQ_CST);
    if (c->map)
        munmap(c->map, c->maplen);
    if (c->fd >= 0)
        close(c->fd);
    free(c->pincount);
    free(c->fills);
    free(c->dir);
    c->magic = 0;
    free(c);
}

/*
 * See cache.h.
 */
void
cache_key_hash(const struct cache *c, const char *key, size_t len, uint8_t out[16])
{
    uint64_t a = cache_hash64(key, len, c->store_id);
    uint64_t b = cache_hash64(key, len, ~c->store_id ^ 0x6b6579ull);

    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

int64_t
cache_max_doc_size(const struct cache *c)
{
    return (int64_t)c->max_doc;
}

struct cache_counters *
cache_counters(struct cache *c)
{
    return c->ctr;
}

/* ------------------------------------------------------------------ */
/* Read path */

/*
 * Pin the segments of e's records (one or two), then check both are alive
 * (in that order: Dekker with the writers, ring.c).  Returns 0 with the
 * pins held, or -1 (lapped; nothing held).
 */
int
cache_ent_pin(struct cache *c, const struct cache_ent *e)
{
    cache_pin(c, cache_seg_of(c->shm, e->off));
    if (e->body_off != e->off)
        cache_pin(c, cache_seg_of(c->shm, e->body_off));
    if (cache_ring_alive(c->shm, e->off)
        && (e->body_off == e->off || cache_ring_alive(c->shm, e->body_off)))
        return 0;
    cache_ent_unpin(c, e);
    return -1;
}

void
cache_ent_unpin(struct cache *c, const struct cache_ent *e)
{
    if (e->body_off != e->off)
        cache_unpin(c, cache_seg_of(c->shm, e->body_off));
    cache_unpin(c, cache_seg_of(c->shm, e->off));
}

/* Check the record at off (inside its segment) and that it belongs to key
 * hash / key.  Returns the record, or NULL with *why set. */
static const struct cache_rec *
rec_at(struct cache *c, uint64_t off, unsigned type, const uint8_t hash[16],
       const char *key, size_t keylen, const char **why)
{
    uint64_t so = off % c->g.seg_size;
    const struct cache_rec *r;

    if (so % CACHE_REC_ALIGN) {
        *why = "entry offset not aligned";
        return NULL;
    }
    r = (const struct cache_rec *)cache_ring_ptr(c, off);
    if (cache_rec_check(r, off, c->g.seg_size - so, why) < 0)
        return NULL;
    if (r->type != type || memcmp(r->key_hash, hash, 16) != 0) {
        *why = "record of another object";
        return NULL;
    }
    if (key && (r->key_len != keylen || memcmp(r + 1, key, keylen) != 0)) {
        *why = "key differs (hash collision)";
        return NULL;
    }
    return r;
}

static int
body_sum_ok(const struct cache_rec *b)
{
    return cache_hash64((const uint8_t *)(b + 1) + b->key_len + b->hdr_len, b->body_len,
                        BODY_SEED) == b->body_sum;
}

/*
 * Validate the records e points at against e itself (and key / hash): the
 * header record at off (served: header block and meta) and the body
 * record at body_off (served: body), which are one OBJECT record until a
 * header refresh, then a HEADERS record and the older OBJECT record it
 * links to.  That OBJECT record keeps its own (original) header block and
 * head_sum: it is checked whole but its header block is not served.  The
 * caller holds the pins (cache_ent_pin).  Returns 0 with *hout, *bout set,
 * or -1 (logged).
 */
int
cache_ent_verify(struct cache *c, const struct cache_ent *e, const uint8_t hash[16],
                 const char *key, size_t keylen, int want_body_sum,
                 const struct cache_rec **hout, const struct cache_rec **bout)
{
    const struct cache_rec *h, *b;
    struct cache_rec_link l;
    const char *why = NULL;

    if (e->type != CACHE_ENT_OBJECT) {
        why = "entry type not supported yet";
        goto bad;
    }
    if (e->body_off > e->off) {
        why = "body record newer than its header record";
        goto bad;
    }
    if (e->off % c->g.seg_size + e->rec_len > c->g.seg_size) {
        why = "entry lengths out of the segment";
        goto bad;
    }
    h = rec_at(c, e->off, e->body_off == e->off ? CACHE_REC_OBJECT : CACHE_REC_HEADERS,
               hash, key, keylen, &why);
    if (h == NULL)
        goto bad;
    if (h->hdr_len != e->hdr_len || h->body_len != e->body_len || h->rec_len != e->rec_len
        || h->key_len != e->key_len) {
        why = "entry and record lengths differ";
        goto bad;
    }
    b = h;
    if (e->body_off != e->off) {
        cache_rec_link_get(h, &l);
        if (l.body_off != e->body_off) {
            why = "header record links another body";
            goto bad;
        }
        b = rec_at(c, e->body_off, CACHE_REC_OBJECT, hash, key, keylen, &why);
        if (b == NULL)
            goto bad;
        /* body_sum equal too: the very body the refresh was made for. */
        if (b->rec_len != l.body_rec_len || b->body_len != h->body_len
            || b->key_len != h->key_len || b->body_sum != h->body_sum) {
            why = "body record differs from its link";
            goto bad;
        }
    }
    if (want_body_sum && !body_sum_ok(b)) {
        why = "body checksum";
        goto bad;
    }
    *hout = h;
    *bout = b;
    return 0;
bad:
    cache_log_warn("cache: dropping object at %llu: %s", (unsigned long long)e->off, why);
    return -1;
}

/*
 * See cache.h.  The hit path: one LMDB read, one or two pins (a private
 * counter, the shared bit only on 0 -> 1), one or two head checksums.
 */
int
cache_lookup(struct cache *c, const char *key, size_t keylen, struct cache_obj *obj)
{
    struct cache_ent e;
    const struct cache_rec *h, *b;
    uint8_t hash[16];
    int rc, want_sum;

    assert(c && c->magic == CACHE_MAGIC);
    obj->magic = 0;
    obj->co_pinned = 0;
    cache_key_hash(c, key, keylen, hash);
    rc = cache_index_get(c, hash, &e);
    if (rc != CACHE_OK)
        goto miss;
    if (e.type != CACHE_ENT_OBJECT)
        goto miss;           /* variants: not served by this version */
    if (cache_ent_pin(c, &e) < 0)
        goto miss;           /* overwritten; the manager's sweep drops the entry */
    want_sum = c->conf.verify
               || e.epoch < __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_RELAXED);
    if (cache_ent_verify(c, &e, hash, key, keylen, want_sum, &h, &b) < 0) {
        cache_ent_unpin(c, &e);
        CTR_ADD(c, corrupt, 1);
        if (cache_index_del(c, hash, &e) == CACHE_OK)
            CTR_ADD(c, evictions, 1);
        goto miss;
    }
    obj->magic = CACHE_OBJ_MAGIC;
    obj->iov[0].iov_base = (uint8_t *)(uintptr_t)(h + 1) + h->key_len;
    obj->iov[0].iov_len = h->hdr_len;
    obj->iov[1].iov_base = (uint8_t *)(uintptr_t)(b + 1) + b->key_len + b->hdr_len;
    obj->iov[1].iov_len = b->body_len;
    obj->meta.status = h->status;
    obj->meta.flags = h->flags;
    obj->meta.stored = h->stored;
    obj->meta.expires = h->expires;
    obj->body_len = b->body_len;
    obj->hdr_len = h->hdr_len;
    memcpy(obj->key_hash, hash, 16);
    obj->co_seg = cache_seg_of(c->shm, e.off);
    obj->co_body_seg = cache_seg_of(c->shm, e.body_off);
    obj->co_body_off = e.body_off;
    obj->co_pinned = e.body_off == e.off ? 1 : 2;
    CTR_ADD(c, hits, 1);
    CTR_ADD(c, bytes_served, h->hdr_len + b->body_len);
    if (c->shm->eviction == CACHE_EVICT_S3FIFO)
        cache_freq_bump(c, hash);
    return CACHE_OK;
miss:
    CTR_ADD(c, misses, 1);
    return rc == CACHE_ERROR ? CACHE_ERROR : CACHE_MISS;
}

/*
 * See cache.h.
 */
void
cache_obj_release(struct cache *c, struct cache_obj *obj)
{
    if (obj->magic != CACHE_OBJ_MAGIC || !obj->co_pinned)
        return;
    if (obj->co_pinned == 2)
        cache_unpin(c, obj->co_body_seg);
    cache_unpin(c, obj->co_seg);
    obj->co_pinned = 0;
    obj->magic = 0;
}

/*
 * See cache.h.
 */
int
cache_remove(struct cache *c, const char *key, size_t keylen)
{
    uint8_t hash[16];

    cache_key_hash(c, key, keylen, hash);
    return cache_index_del(c, hash, NULL);
}

/* ------------------------------------------------------------------ */
/* Write path */

/* Mark [off, off + len) as dead space, when a header fits. */
static void
write_hole(struct cache *c, uint64_t off, uint64_t len)
{
    struct cache_rec r;

    if (len < CACHE_REC_SIZE)
        return;
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_HOLE;
    r.rec_len = (uint32_t)len;
    r.abs_off = off;
    cache_rec_seal(&r, NULL, 0);
    memcpy(cache_ring_ptr(c, off), &r, sizeof(r));
}

static void
fill_release(struct cache_fill *f)
{
    if (f->pinned)
        cache_unpin(f->c, f->seg);
    f->pinned = 0;
    f->state = FILL_FREE;
}

static int
fill_fail(struct cache_fill *f, int rc)
{
    f->state = FILL_DEAD;
    CTR_ADD(f->c, fill_failures, 1);
    return rc;
}

/*
 * See cache.h.
 */
int
cache_fill_begin(struct cache *c, const char *key, size_t keylen,
                 const struct cache_meta *meta, const void *hdr, size_t hdrlen,
                 int64_t body_len, struct cache_fill **out)
{
    struct cache_fill *f = NULL;
    uint64_t len;
    uint8_t *p;
    int rc;

    assert(c && c->magic == CACHE_MAGIC);
    *out = NULL;
    if (key == NULL || keylen == 0 || meta == NULL || body_len < -1
        || (hdrlen && hdr == NULL))
        return CACHE_INVAL;
    if (keylen > c->g.seg_size || hdrlen > c->g.seg_size
        || (body_len >= 0 && (uint64_t)body_len > c->max_doc)) {
        rc = CACHE_TOOBIG;
        goto refuse;
    }
    len = cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen,
                          body_len >= 0 ? (uint64_t)body_len : FILL_CHUNK);
    if (body_len < 0 && len > c->g.seg_size)
        len = c->g.seg_size;
    if (cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen,
                        body_len >= 0 ? (uint64_t)body_len : 0) > c->g.seg_size) {
        rc = CACHE_TOOBIG;
        goto refuse;
    }
    for (int i = 0; i < c->nfills; i++)
        if (c->fills[i].state == FILL_FREE) {
            f = &c->fills[i];
            break;
        }
    if (f == NULL) {
        rc = CACHE_BUSY;
        goto refuse;
    }
    memset(f, 0, sizeof(*f));
    if ((rc = cache_ring_reserve(c, len, &f->off)) != CACHE_OK)
        goto refuse;
    f->magic = CACHE_FILL_MAGIC;
    f->state = FILL_OPEN;
    f->c = c;
    f->seg = cache_seg_of(c->shm, f->off);
    f->pinned = 1;
    f->ext_len = len;
    f->key_len = (uint32_t)keylen;
    f->hdr_len = (uint32_t)hdrlen;
    f->want = body_len;
    f->meta = *meta;
    f->meta.flags &= (uint16_t)~CACHE_F_STORE_MASK;
    cache_key_hash(c, key, keylen, f->hash);
    p = cache_ring_ptr(c, f->off);
    /* No header yet: a crash now leaves bytes that validate as nothing. */
    memset(p, 0, CACHE_REC_SIZE);
    memcpy(p + CACHE_REC_SIZE, key, keylen);
    if (hdrlen)
        memcpy(p + CACHE_REC_SIZE + keylen, hdr, hdrlen);
    *out = f;
    return CACHE_OK;
refuse:
    CTR_ADD(c, fill_failures, 1);
    return rc;
}

/* Move an unknown-length fill to a fresh reservation of new_len bytes. */
static int
fill_relocate(struct cache_fill *f, uint64_t new_len)
{
    struct cache *c = f->c;
    uint64_t off, used = CACHE_REC_SIZE + f->key_len + f->hdr_len + f->body_len;
    uint32_t oldseg = f->seg;
    int rc;

    if ((rc = cache_ring_reserve(c, new_len, &off)) != CACHE_OK)
        return rc;
    memcpy(cache_ring_ptr(c, off), cache_ring_ptr(c, f->off), used);
    if (!cache_ring_trim(c, f->off, f->ext_len, 0))
        write_hole(c, f->off, f->ext_len);
    cache_unpin(c, oldseg);
    f->off = off;
    f->ext_len = new_len;
    f->seg = cache_seg_of(c->shm, off);
    return CACHE_OK;
}

/*
 * See cache.h.
 */
int
cache_fill_write(struct cache_fill *f, const void *data, size_t len)
{
    struct cache *c;
    uint64_t nb, need;
    int rc;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    if (f->state != FILL_OPEN)
        return CACHE_ABORTED;
    c = f->c;
    nb = f->body_len + len;
    if ((f->want >= 0 && nb > (uint64_t)f->want) || nb > c->max_doc)
        return fill_fail(f, CACHE_TOOBIG);
    need = cache_rec_total(f->key_len, f->hdr_len, nb);
    if (need > c->g.seg_size)
        return fill_fail(f, CACHE_TOOBIG);
    if (need > f->ext_len) {
        uint64_t grow = f->ext_len * 2;

        assert(f->want < 0);
        if (grow > c->g.seg_size)
            grow = c->g.seg_size;
        if (grow < need)
            grow = need;
        if (cache_ring_extend(c, f->off, f->ext_len, grow) == CACHE_OK)
            f->ext_len = grow;
        else if ((rc = fill_relocate(f, grow)) != CACHE_OK)
            return fill_fail(f, rc);
    }
    memcpy(cache_ring_ptr(c, f->off) + CACHE_REC_SIZE + f->key_len + f->hdr_len + f->body_len,
           data, len);
    f->body_len = nb;
    return CACHE_OK;
}

/*
 * See cache.h.
 */
int
cache_fill_commit(struct cache_fill *f, int *replaced)
{
    struct cache *c;
    struct cache_rec r;
    struct cache_ent e;
    uint8_t *p;
    const char *why = NULL;
    int rc;

    assert(f && f->magic == CACHE_FILL_MAGIC);
    c = f->c;
    if (replaced)
        *replaced = 0;
    if (f->state != FILL_OPEN) {
        fill_release(f);
        return CACHE_ABORTED;
    }
    if (f->want >= 0 && f->body_len != (uint64_t)f->want) {
        rc = fill_fail(f, CACHE_ABORTED);       /* short body: origin closed early */
        goto out;
    }
    if (!cache_ring_alive(c->shm, f->off)) {
        rc = fill_fail(f, CACHE_ABORTED);       /* the ring lapped the fill */
        goto out;
    }
    p = cache_ring_ptr(c, f->off);
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_OBJECT;
    r.flags = f->meta.flags;
    r.status = f->meta.status;
    r.key_len = f->key_len;
    r.hdr_len = f->hdr_len;
    r.body_len = f->body_len;
    r.rec_len = (uint32_t)cache_rec_total(f->key_len, f->hdr_len, f->body_len);
    r.abs_off = f->off;
    r.stored = f->meta.stored;
    r.expires = f->meta.expires;
    memcpy(r.key_hash, f->hash, 16);
    r.body_sum = cache_hash64(p + CACHE_REC_SIZE + f->key_len + f->hdr_len, f->body_len,
                              BODY_SEED);
    cache_rec_seal(&r, p + CACHE_REC_SIZE, (size_t)f->key_len + f->hdr_len);
    memcpy(p, &r, sizeof(r));
    assert(r.rec_len <= f->ext_len);
    if (f->ext_len > r.rec_len
        && !cache_ring_trim(c, f->off, f->ext_len, r.rec_len))
        write_hole(c, f->off + r.rec_len, f->ext_len - r.rec_len);
    if (cache_rec_check((const struct cache_rec *)p, f->off,
                        c->g.seg_size - f->off % c->g.seg_size, &why) < 0) {
        cache_log_error("cache: record failed its own check after writing: %s", why);
        rc = fill_fail(f, CACHE_ERROR);
        goto out;
    }
    memset(&e, 0, sizeof(e));
    e.magic = CACHE_ENT_MAGIC;
    e.version = CACHE_ENT_VERSION;
    e.type = CACHE_ENT_OBJECT;
    e.flags = r.flags;
    e.status = r.status;
    e.epoch = c->epoch;
    e.rec_len = r.rec_len;
    e.hdr_len = r.hdr_len;
    e.key_len = r.key_len;
    e.off = f->off;
    e.body_off = f->off;
    e.body_len = r.body_len;
    e.stored = r.stored;
    e.expires = r.expires;
    /* The record's bytes must be visible before the entry that points at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_put(c, f->hash, &e, replaced);
    if (rc != CACHE_OK) {
        fill_fail(f, rc);
        goto out;
    }
    CTR_ADD(c, fills, 1);
    CTR_ADD(c, bytes_written, r.rec_len);
out:
    fill_release(f);
    return rc;
}

/*
 * See cache.h.
 */
void
cache_fill_abort(struct cache_fill *f)
{
    if (f == NULL)
        return;
    assert(f->magic == CACHE_FILL_MAGIC);
    if (f->state == FILL_FREE)
        return;
    if (f->state == FILL_OPEN) {
        CTR_ADD(f->c, fill_failures, 1);
        if (!cache_ring_trim(f->c, f->off, f->ext_len, 0))
            write_hole(f->c, f->off, f->ext_len);
    }
    fill_release(f);
}

/* ------------------------------------------------------------------ */
/* Header refresh (RFC 9111 4.3.4: a 304 updates the stored headers) */

/*
 * Write a HEADERS record at the head that links to the body record of the
 * entry stored under key, and point the entry at both.  The body is never
 * copied: it stays in its OBJECT record until the ring laps it.  Order is
 * the fills' order: record written, sealed and read back through the
 * validator, then the index put, which is conditional (compare-and-swap
 * in the write txn) on the entry still serving the same body record: a
 * refresh never resurrects a removed object and never lands on a body
 * filled meanwhile.  held_body (optional) pins the refresh to the body the
 * caller revalidated.
 *
 * Pins: the entry's records are pinned (on top of whatever the caller
 * holds: counts, never waits) from before they are validated until the
 * entry is committed, and the new record's segment is pinned by its
 * reservation.  A reservation can lap the body's segment only in the
 * sense of the alive rule (writers skip pinned segments), so the body is
 * re-checked alive after it.
 */
static int
update_headers(struct cache *c, const char *key, size_t keylen, const uint64_t *held_body,
               const struct cache_meta *meta, const void *hdr, size_t hdrlen)
{
    struct cache_ent e, ne;
    const struct cache_rec *h, *b;
    struct cache_rec r;
    struct cache_rec_link l;
    uint8_t hash[16], *p;
    uint64_t len, off;
    uint32_t seg;
    const char *why = NULL;
    int rc, want_sum;

    if (key == NULL || keylen == 0 || meta == NULL || (hdrlen && hdr == NULL))
        return CACHE_INVAL;
    if (keylen > c->g.seg_size || hdrlen > c->g.seg_size)
        return CACHE_TOOBIG;
    len = cache_rec_total((uint32_t)keylen, (uint32_t)hdrlen, CACHE_LINK_SIZE);
    if (len > c->g.seg_size)
        return CACHE_TOOBIG;
    cache_key_hash(c, key, keylen, hash);
    if ((rc = cache_index_get(c, hash, &e)) != CACHE_OK)
        return rc;
    if (e.type != CACHE_ENT_OBJECT || (held_body && e.body_off != *held_body))
        return CACHE_MISS;
    if (cache_ent_pin(c, &e) < 0)
        return CACHE_MISS;
    /* The new entry is stamped with this epoch: a body from before an
     * unclean shutdown must be verified now, or the refresh would launder
     * it into a trusted entry. */
    want_sum = c->conf.verify
               || e.epoch < __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_RELAXED);
    if (cache_ent_verify(c, &e, hash, key, keylen, want_sum, &h, &b) < 0) {
        cache_ent_unpin(c, &e);
        CTR_ADD(c, corrupt, 1);
        if (cache_index_del(c, hash, &e) == CACHE_OK)
            CTR_ADD(c, evictions, 1);
        return CACHE_MISS;
    }
    memset(&l, 0, sizeof(l));
    l.body_off = e.body_off;
    l.body_rec_len = b->rec_len;
    memset(&r, 0, sizeof(r));
    r.magic = CACHE_REC_MAGIC;
    r.version = CACHE_REC_VERSION;
    r.type = CACHE_REC_HEADERS;
    r.flags = meta->flags & (uint16_t)~CACHE_F_STORE_MASK;
    r.status = meta->status;
    r.key_len = (uint32_t)keylen;
    r.hdr_len = (uint32_t)hdrlen;
    r.rec_len = (uint32_t)len;
    r.body_len = b->body_len;
    r.stored = meta->stored;
    r.expires = meta->expires;
    memcpy(r.key_hash, hash, 16);
    r.body_sum = b->body_sum;
    if ((rc = cache_ring_reserve(c, len, &off)) != CACHE_OK) {
        cache_ent_unpin(c, &e);
        CTR_ADD(c, fill_failures, 1);
        return rc;
    }
    seg = cache_seg_of(c->shm, off);
    p = cache_ring_ptr(c, off);
    if (!cache_ring_alive(c->shm, e.body_off)) {
        rc = CACHE_MISS;                /* lapped meanwhile (maybe by us) */
        goto drop;
    }
    /* Header struct last, as in a fill: until then the bytes validate as
     * nothing. */
    memset(p, 0, CACHE_REC_SIZE);
    memcpy(p + CACHE_REC_SIZE, key, keylen);
    if (hdrlen)
        memcpy(p + CACHE_REC_SIZE + keylen, hdr, hdrlen);
    memcpy(p + CACHE_REC_SIZE + keylen + hdrlen, &l, sizeof(l));
    r.abs_off = off;
    cache_rec_seal(&r, p + CACHE_REC_SIZE, keylen + hdrlen + CACHE_LINK_SIZE);
    memcpy(p, &r, sizeof(r));
    if (cache_rec_check((const struct cache_rec *)p, off, c->g.seg_size - off % c->g.seg_size,
                        &why) < 0) {
        cache_log_error("cache: header record failed its own check after writing: %s", why);
        rc = CACHE_ERROR;
        goto drop;
    }
    memset(&ne, 0, sizeof(ne));
    ne.magic = CACHE_ENT_MAGIC;
    ne.version = CACHE_ENT_VERSION;
    ne.type = CACHE_ENT_OBJECT;
    ne.flags = r.flags;
    ne.status = r.status;
    ne.epoch = c->epoch;
    ne.rec_len = r.rec_len;
    ne.hdr_len = r.hdr_len;
    ne.key_len = r.key_len;
    ne.off = off;
    ne.body_off = e.body_off;
    ne.body_len = r.body_len;
    ne.stored = r.stored;
    ne.expires = r.expires;
    /* The record's bytes must be visible before the entry that points at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_put_if(c, hash, &ne, e.body_off);
    if (rc != CACHE_OK)
        goto drop;
    CTR_ADD(c, bytes_written, r.rec_len);
    cache_unpin(c, seg);
    cache_ent_unpin(c, &e);
    return CACHE_OK;

drop:
    /* Nothing points at it: unseal it so no scan mistakes it for live. */
    memset(p, 0, CACHE_REC_SIZE);
    if (!cache_ring_trim(c, off, len, 0))
        write_hole(c, off, len);
    cache_unpin(c, seg);
    cache_ent_unpin(c, &e);
    if (rc != CACHE_MISS)
        CTR_ADD(c, fill_failures, 1);
    return rc;
}

/*
 * See cache.h.
 */
int
cache_update_headers(struct cache *c, const char *key, size_t keylen,
                     const struct cache_meta *meta, const void *hdr, size_t hdrlen)
{
    assert(c && c->magic == CACHE_MAGIC);
    return update_headers(c, key, keylen, NULL, meta, hdr, hdrlen);
}

/*
 * See cache.h.
 */
int
cache_obj_update_headers(struct cache *c, const struct cache_obj *held, const char *key,
                         size_t keylen, const struct cache_meta *meta, const void *hdr,
                         size_t hdrlen)
{
    uint8_t hash[16];

    assert(c && c->magic == CACHE_MAGIC);
    if (held == NULL || held->magic != CACHE_OBJ_MAGIC || !held->co_pinned || key == NULL)
        return CACHE_INVAL;
    cache_key_hash(c, key, keylen, hash);
    if (memcmp(hash, held->key_hash, 16) != 0)
        return CACHE_INVAL;
    return update_headers(c, key, keylen, &held->co_body_off, meta, hdr, hdrlen);
}

/* ------------------------------------------------------------------ */
/* Eviction (S3-FIFO style; FORMAT.md "Eviction") */

/* Relocations per index txn: one txn costs about as much as a few dozen
 * puts inside it, and 64 keeps the pins held for a batch (two per copy)
 * and the on-stack batch (~12 KiB) small. */
#define EVICT_BATCH 64

struct evict_run {
    uint64_t          budget;   /* record bytes this segment may still rewrite */
    int64_t           now;
    int               n;
    int               stop;
    int               moved;
    struct cache_ent  old[EVICT_BATCH];     /* pinned (cache_ent_pin) until flushed */
    uint32_t          seg[EVICT_BATCH];     /* segment of the new record (pinned) */
    struct cache_swap sw[EVICT_BATCH];
};

/* Publish a batch: one txn of compare-and-swaps, then drop the pins.  A
 * record whose swap failed (the object was refilled, refreshed or removed
 * meanwhile) is turned into a hole, so no scan of the segments can
 * mistake it for live. */
static void
evict_flush(struct cache *c, struct evict_run *er)
{
    int rc;

    if (er->n == 0)
        return;
    /* The records' bytes must be visible before the entries that point at them. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    rc = cache_index_swap(c, er->sw, er->n);
    if (rc < 0)
        er->stop = 1;
    for (int i = 0; i < er->n; i++) {
        struct cache_swap *w = &er->sw[i];

        if (w->done) {
            cache_freq_decay(c, w->hash);
            CTR_ADD(c, relocations, 1);
            CTR_ADD(c, bytes_relocated, w->ne.rec_len);
            er->moved++;
        } else {
            write_hole(c, w->ne.off, w->ne.rec_len);
        }
        cache_unpin(c, er->seg[i]);
        cache_ent_unpin(c, &er->old[i]);
    }
    er->n = 0;
}

/*
 * The OBJECT record r at p (in the segment being prepared, pinned by the
 * caller) is hot: if the index still serves its body from p and the
 * object is fresh, copy it to a new record at the head.  The copy is
 * made like a fill: reserve, write everything but the header struct,
 * seal, read back through the validator; it is published by evict_flush.
 */
static void
evict_one(struct cache *c, struct evict_run *er, uint64_t p, const struct cache_rec *r)
{
    struct cache_ent e, *ne;
    const struct cache_rec *h, *b;
    struct cache_rec nr;
    uint8_t hash[16], *dst;
    const char *key = (const char *)(r + 1), *why = NULL;
    uint64_t len, off;
    int want_sum;

    memcpy(hash, r->key_hash, 16);
    if (cache_index_get(c, hash, &e) != CACHE_OK || e.type != CACHE_ENT_OBJECT
        || e.body_off != p)
        return;                 /* replaced, refreshed elsewhere or removed: not ours */
    if (e.expires <= er->now) {
        cache_freq_clear(c, hash);      /* stale: let it go, and a refetch starts cold */
        return;
    }
    if (cache_ent_pin(c, &e) < 0)
        return;
    want_sum = c->conf.verify
               || e.epoch < __atomic_load_n(&c->shm->trust_epoch, __ATOMIC_RELAXED);
    if (cache_ent_verify(c, &e, hash, key, r->key_len, want_sum, &h, &b) < 0)
        goto unpin;             /* the next lookup deletes it */
    len = cache_rec_total(h->key_len, h->hdr_len, b->body_len);
    if (len > er->budget) {
        er->stop = 1;
        goto unpin;
    }
    if (er->n == EVICT_BATCH)
        evict_flush(c, er);
    if (cache_ring_reserve(c, len, &off) != CACHE_OK) {
        er->stop = 1;
        goto unpin;
    }
    dst = cache_ring_ptr(c, off);
    /* The reservation may have moved the head past the source: the
     * records are pinned, so that means "skipped", and they are dead. */
    if (!cache_ring_alive(c->shm, e.off) || !cache_ring_alive(c->shm, e.body_off)) {
        er->stop = 1;
        write_hole(c, off, len);
        cache_unpin(c, cache_seg_of(c->shm, off));
        goto unpin;
    }
    memset(dst, 0, CACHE_REC_SIZE);
    memcpy(dst + CACHE_REC_SIZE, key, h->key_len);
    memcpy(dst + CACHE_REC_SIZE + h->key_len, (const uint8_t *)(h + 1) + h->key_len,
           h->hdr_len);
    memcpy(dst + CACHE_REC_SIZE + h->key_len + h->hdr_len,
           (const uint8_t *)(b + 1) + b->key_len + b->hdr_len, b->body_len);
    memset(&nr, 0, sizeof(nr));
    nr.magic = CACHE_REC_MAGIC;
    nr.version = CACHE_REC_VERSION;
    nr.type = CACHE_REC_OBJECT;
    nr.flags = h->flags;
    nr.status = h->status;
    nr.key_len = h->key_len;
    nr.hdr_len = h->hdr_len;
    nr.rec_len = (uint32_t)len;
    nr.abs_off = off;
    nr.body_len = b->body_len;
    nr.stored = h->stored;
    nr.expires = h->expires;
    memcpy(nr.key_hash, hash, 16);
    /* The body is copied from pinned bytes: its sum carries over (and a
     * body damaged on disk keeps failing its check). */
    nr.body_sum = b->body_sum;
    cache_rec_seal(&nr, dst + CACHE_REC_SIZE, (size_t)nr.key_len + nr.hdr_len);
    memcpy(dst, &nr, sizeof(nr));
    if (cache_rec_check((const struct cache_rec *)dst, off,
                        c->g.seg_size - off % c->g.seg_size, &why) < 0) {
        cache_log_error("cache: relocated record failed its own check: %s", why);
        er->stop = 1;
        write_hole(c, off, len);
        cache_unpin(c, cache_seg_of(c->shm, off));
        goto unpin;
    }
    er->budget -= len;
    er->old[er->n] = e;
    er->seg[er->n] = cache_seg_of(c->shm, off);
    memcpy(er->sw[er->n].hash, hash, 16);
    er->sw[er->n].old_off = e.off;
    er->sw[er->n].old_body_off = e.body_off;
    ne = &er->sw[er->n].ne;
    memset(ne, 0, sizeof(*ne));
    ne->magic = CACHE_ENT_MAGIC;
    ne->version = CACHE_ENT_VERSION;
    ne->type = CACHE_ENT_OBJECT;
    ne->flags = nr.flags;
    ne->status = nr.status;
    ne->epoch = c->epoch;
    ne->rec_len = nr.rec_len;
    ne->hdr_len = nr.hdr_len;
    ne->key_len = nr.key_len;
    ne->off = off;
    ne->body_off = off;
    ne->body_len = nr.body_len;
    ne->stored = nr.stored;
    ne->expires = nr.expires;
    er->n++;
    return;
unpin:
    cache_ent_unpin(c, &e);
}

/*
 * Prepare absolute segment src for being overwritten: walk its records
 * and rewrite the hot, fresh ones at the head, within a budget of half a
 * segment (so the head always gains at least half a segment per lap of
 * eviction work).  The segment is pinned for the walk, so its bytes stay
 * put even if the head reaches it meanwhile (the head then skips it, the
 * walk sees it dead and stops).  Returns the number of objects relocated.
 */
int
cache_evict_segment(struct cache *c, uint64_t src)
{
    struct cache_shm *s = c->shm;
    struct evict_run run, *er = &run;   /* ~12 KiB: no allocation */
    uint64_t base = src * s->seg_size, end = base + s->seg_size, p;
    uint32_t seg = (uint32_t)(src % s->nseg);

    memset(er, 0, offsetof(struct evict_run, old));
    er->budget = s->seg_size / 2;
    er->now = (int64_t)time(NULL);
    c->in_evict++;
    cache_pin(c, seg);
    for (p = base; !er->stop && p + CACHE_REC_SIZE <= end;) {
        const struct cache_rec *r = (const struct cache_rec *)cache_ring_ptr(c, p);
        const char *why;

        if (!cache_ring_alive(s, p))
            break;              /* lapped (skipped) or below the floor */
        if (cache_rec_check(r, p, end - p, &why) < 0) {
            p += CACHE_REC_ALIGN;       /* aborted fill, unused tail: resync */
            continue;
        }
        if (r->type == CACHE_REC_OBJECT && cache_freq_get(c, r->key_hash) >= CACHE_FREQ_HOT)
            evict_one(c, er, p, r);
        p += r->rec_len;
    }
    evict_flush(c, er);
    cache_unpin(c, seg);
    c->in_evict--;
    return er->moved;
}

/*
 * The head is in cur_seg: prepare the segment it will enter next (the
 * records lapped there, nseg segments ago), unless some process already
 * claimed it.  Called by whichever process moved the head into a new
 * segment (cache_ring_reserve), and by the manager's tick as a backstop.
 * Returns the number of objects relocated.
 */
int
cache_evict_ahead(struct cache *c)
{
    struct cache_shm *s = c->shm;
    uint64_t want, old;

    if (s->eviction != CACHE_EVICT_S3FIFO || c->in_evict)
        return 0;
    want = __atomic_load_n(&s->cur_seg, __ATOMIC_SEQ_CST) + 1;
    if (want < s->nseg)
        return 0;               /* first lap: that slot holds nothing yet */
    old = __atomic_load_n(&s->evict_next, __ATOMIC_SEQ_CST);
    do {
        if (old >= want)
            return 0;
    } while (!__atomic_compare_exchange_n(&s->evict_next, &old, want, 0, __ATOMIC_SEQ_CST,
                                          __ATOMIC_SEQ_CST));
    return cache_evict_segment(c, want - s->nseg);
}

/* ------------------------------------------------------------------ */
/* Manager */

/*
 * See cache.h.
 */
int
cache_manager_tick(struct cache *c)
{
    int dead = 0, rc, removed = 0;

    assert(c && c->magic == CACHE_MAGIC);
    if ((rc = mdb_env_sync(c->env, 1)) != 0)
        cache_log_error("cache: index sync: %s", mdb_strerror(rc));
    if ((rc = mdb_reader_check(c->env, &dead)) != 0)
        cache_log_error("cache: mdb_reader_check: %s", mdb_strerror(rc));
    else if (dead > 0)
        cache_log_info("cache: cleared %d stale index reader slot(s)", dead);
    rc = cache_index_highwater(c);
    if (rc > 0)
        removed += rc;
    rc = cache_index_sweep(c, 4096);
    if (rc > 0)
        removed += rc;
    cache_evict_ahead(c);       /* normally done by the process that moved the head */
    if (cache_index_save_ring(c) != CACHE_OK)
        return CACHE_ERROR;
    return removed;
}

/*
 * See cache.h.
 */
int
cache_mark_clean_shutdown(struct cache *c)
{
    struct cache_store_hdr h;
    int rc;

    assert(c && c->magic == CACHE_MAGIC);
    if (cache_index_save_ring(c) != CACHE_OK)
        return CACHE_ERROR;
    if ((rc = mdb_env_sync(c->env, 1)) != 0) {
        cache_log_error("cache: index sync: %s", mdb_strerror(rc));
        return CACHE_ERROR;
    }
    if (msync(c->map, c->maplen, MS_SYNC) < 0) {
        cache_log_error("cache: msync: %s", strerror(errno));
        return CACHE_ERROR;
    }
    if (hdr_read(c->fd, &h) < 0 || hdr_mismatch(&h, &c->g) != NULL
        || h.store_id != c->store_id)
        return CACHE_ERROR;
    h.clean = HDR_CLEAN;
    if (hdr_write(c->fd, &h) < 0) {
        cache_log_error("cache: writing the store header: %s", strerror(errno));
        return CACHE_ERROR;
    }
    return CACHE_OK;
}

const char *
cache_strerror(int rc)
{
    switch (rc) {
    case CACHE_OK:      return "ok";
    case CACHE_MISS:    return "not in cache";
    case CACHE_ERROR:   return "cache error";
    case CACHE_FULL:    return "no cache space right now";
    case CACHE_TOOBIG:  return "object too large for the cache";
    case CACHE_BUSY:    return "too many concurrent fills";
    case CACHE_ABORTED: return "fill aborted";
    case CACHE_INVAL:   return "invalid argument";
    default:            return "unknown cache error";
    }
}
