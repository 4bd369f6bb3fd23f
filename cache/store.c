/*
 * cache/store.c: the store's files and its lifecycle: prepare, open, close,
 * clean shutdown (and cache_strerror).
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
 * it; later openers find it there.  The last process with the store open
 * (the cache manager) records a clean shutdown in the store header.
 *
 * The other jobs live next door: the read path in lookup.c, fills in
 * fill.c, header refresh in refresh.c, eviction in evict.c, the manager's
 * housekeeping in manager.c.
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

#define DEFAULT_FILLS 256

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
    if (h->version < CACHE_STORE_VERSION_MIN || h->version > CACHE_STORE_VERSION)
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

int64_t
cache_objects(struct cache *c)
{
    size_t n;

    return c != NULL && index_entries(c, &n) == 0 ? (int64_t)n : -1;
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
    if (!fresh && h.version < CACHE_STORE_VERSION) {
        /* Layout 1 is layout 2 without EXTENT and CHAIN records: every
         * record, entry and the ring meta read the same.  Only the header
         * says so (written below); nothing is wiped. */
        cache_log_info("cache: %s: layout version %u upgraded in place to %u", path,
                       h.version, CACHE_STORE_VERSION);
        h.version = CACHE_STORE_VERSION;
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
    /* A store from before the purge tables gains them (empty, then filled
     * from the index); a failure only makes tag and prefix purges miss
     * the older objects, so it is not fatal. */
    cache_pix_upgrade(&c, fd);
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
    /* Objects span segments, and a fill keeps what it wrote pinned until
     * it commits: 0 means a quarter of the ring, and no setting goes past
     * half of it. */
    c->max_doc = (uint64_t)c->g.nseg * c->g.seg_size / 4;
    if (cf->max_doc_size > 0)
        c->max_doc = (uint64_t)cf->max_doc_size < (uint64_t)c->g.nseg * c->g.seg_size / 2
                     ? (uint64_t)cf->max_doc_size : (uint64_t)c->g.nseg * c->g.seg_size / 2;
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

uint64_t
cache_fill_max_extents(const struct cache *c, uint64_t body_len)
{
    /* extent 0 holds at least three quarters of a segment (its key and
     * header block are at most a quarter), every other one all of a
     * segment but its record's header and alignment */
    uint64_t first = c->g.seg_size - c->g.seg_size / 4;

    if (body_len <= first)
        return 1;
    return 2 + (body_len - first) / (c->g.seg_size - CACHE_REC_SIZE - CACHE_REC_ALIGN);
}

struct cache_counters *
cache_counters(struct cache *c)
{
    return c->ctr;
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
