/*
 * cache/cache.h: the shared object store (API).
 *
 * Who calls what:
 *   master, before the first fork:  cache_shm_size(), cache_shm_init()
 *   a short-lived child of master:  cache_store_prepare()
 *   every worker and the manager:   cache_open() after fork, cache_close()
 *   workers:                        cache_lookup()/cache_obj_release(),
 *                                   cache_fill_*(), cache_remove(),
 *                                   cache_[obj_]update_headers()
 *   the cache manager:              cache_manager_run() (manager.c), which
 *                                   calls cache_manager_tick() on a timer
 *                                   and cache_mark_clean_shutdown() last
 *   master, after reaping a child:  cache_slot_reset()
 *
 * Nothing here blocks for long: the only locks are LMDB's writer lock
 * (short write txns) and the ring allocation mutex (a few loads/stores).
 * Page faults on the content mapping can block on disk I/O.
 * Layouts and rules: cache/FORMAT.md.
 */
#ifndef CISTERN_CACHE_H
#define CISTERN_CACHE_H

#include "cache/cache-t.h"

struct cache;
struct cache_fill;

/* Logging.  cache/ knows nothing of the daemon's error log: it hands each
 * line (without a trailing newline) to the function given here, which the
 * daemon points at its own log before the first fork.  With none set (the
 * default, and what the unit tests and bench tools get) lines are dropped;
 * every failure is also reported through a return code. */
enum cache_log_level {
    CACHE_LOG_INFO = 0,
    CACHE_LOG_WARN,
    CACHE_LOG_ERROR,
};
typedef void (*cache_log_fn)(enum cache_log_level level, const char *line);
/* Set (or, with NULL, remove) the process-wide log callback. */
void cache_set_log(cache_log_fn fn);

/* Bytes of shared memory the cache needs for nslots process slots (every
 * worker slot plus the cache manager's) and the store described by cf.
 * Returns 0 when cf is unusable (store too small). */
size_t cache_shm_size(const struct cache_conf *cf, int nslots);

/* Lay out the shared area (len >= cache_shm_size()).  Called once by the
 * master before forking; area must be MAP_SHARED and 64-byte aligned.  Returns CACHE_OK or
 * CACHE_INVAL / CACHE_ERROR. */
int cache_shm_init(void *area, size_t len, const struct cache_conf *cf,
                   int nslots);

/* Create, check and repair the store under cf->dir: re-initialise it (with a
 * log line) when its layout version or geometry differs, re-extend a
 * content file of the wrong size, rebuild a broken index, and note an
 * unclean previous shutdown (entries written before it are then checksummed
 * before being served).  Run in a child that exits afterwards: it opens
 * LMDB.  Returns CACHE_OK, or CACHE_ERROR with a message in err. */
int cache_store_prepare(const struct cache_conf *cf, char *err, size_t errlen);

/* Open the prepared store in this process (after fork), using slot `slot`
 * of the shared area.  Returns the handle, or NULL with a message in err. */
struct cache *cache_open(const struct cache_conf *cf, void *shm_area, int slot,
                         char *err, size_t errlen);

/* Abort open fills, release the LMDB env and every mapping.  Objects still
 * held (not released) by the caller must not be used afterwards. */
void cache_close(struct cache *c);

/* 128-bit hash of a cache key (the index key), seeded per store so that
 * colliding keys cannot be prepared offline. */
void cache_key_hash(const struct cache *c, const char *key, size_t len,
                    uint8_t out[16]);

/* The largest body cache_fill_begin() accepts with an empty header block. */
int64_t cache_max_doc_size(const struct cache *c);
/* The most extents a fill of a body_len-byte body can take (each extent
 * fills a segment but for its record's header, the key and header block
 * of extent 0, and the first and last extents' partial segments). */
uint64_t cache_fill_max_extents(const struct cache *c, uint64_t body_len);

/* Look key up.  CACHE_OK: *obj holds iovecs into the mapping and metadata,
 * and stays valid (pinned) until cache_obj_release(); the hit is counted
 * for eviction (a relaxed store in shm).  CACHE_MISS: nothing
 * usable (absent, overwritten, damaged).  Never copies or allocates. */
int cache_lookup(struct cache *c, const char *key, size_t keylen,
                 struct cache_obj *obj);
/* The same with the key's hash (cache_key_hash) already made: a caller
 * that needs the hash anyway (the fill table) makes it once. */
int cache_lookup_hashed(struct cache *c, const char *key, size_t keylen,
                        const uint8_t hash[16], struct cache_obj *obj);
/* The same, counted in no hit, miss or bytes-served counter: a second
 * look on behalf of a request whose lookup was counted already. */
int cache_probe_hashed(struct cache *c, const char *key, size_t keylen,
                       const uint8_t hash[16], struct cache_obj *obj);

/* Body bytes of held object o from byte pos on: *p points into the
 * mapping (pinned while o is held) and the return value says how many
 * bytes from there are contiguous (up to the end of the extent holding
 * pos; the whole rest for an object within one segment).  0 (and *p
 * NULL) when pos is past the body.  Never copies. */
size_t cache_obj_span(struct cache *c, const struct cache_obj *o, uint64_t pos,
                      const void **p);

/* A number naming held object o's stored head while the store is open:
 * another head (another object, a refresh, a relocation), another
 * number.  Never 0.  For what a worker derives from a head once and
 * keeps (worker/plugin.c: the field names a hit's head holds). */
static inline uint64_t
cache_obj_head_id(const struct cache_obj *o)
{
    return o->co_off + 1;       /* an absolute ring offset: never reused */
}

/* Unpin an object returned by cache_lookup().  Idempotent. */
void cache_obj_release(struct cache *c, struct cache_obj *obj);

/* Start storing an object: reserve ring space for the record (exactly, when
 * body_len >= 0; a growing extent when body_len == -1) and copy key and
 * header block in.  The call whose reservation enters a new segment also
 * does the eviction work for the next one (FORMAT.md: at most half a
 * segment copied).  Returns CACHE_OK with *out set, or CACHE_TOOBIG,
 * CACHE_FULL (no space now), CACHE_BUSY (no free fill slot), CACHE_INVAL. */
int cache_fill_begin(struct cache *c, const char *key, size_t keylen,
                     const struct cache_meta *meta, const void *hdr,
                     size_t hdrlen, int64_t body_len, struct cache_fill **out);

/* Append body bytes.  Returns CACHE_OK, or an error (CACHE_TOOBIG when the
 * body outgrew the announced length or the largest object, CACHE_FULL, ...)
 * after which the fill is dead: the caller must still call
 * cache_fill_abort(). */
int cache_fill_write(struct cache_fill *f, const void *data, size_t len);

/* Check the written record and publish it in the index.  Returns CACHE_OK
 * (the fill slot is released; *replaced, if given, says whether an older
 * object was replaced), or an error, after which nothing became visible and
 * the fill slot is released too. */
int cache_fill_commit(struct cache_fill *f, int *replaced);

/* Purges begun so far, in every process (a counter).  A caller that
 * fetched what it stores since generation gen says so with
 * cache_fill_since(f, gen): if a purge began after gen, the object is
 * stored stale (it may be what the purge meant to remove).  A fill
 * counts from cache_fill_begin() otherwise. */
uint64_t cache_purge_gen(const struct cache *c);
void     cache_fill_since(struct cache_fill *f, uint64_t gen);

/* Give up on a fill; nothing becomes visible.  Accepts a dead fill. */
void cache_fill_abort(struct cache_fill *f);

/* Read-while-writer (issue 21).  Where an open fill's bytes are: the
 * header block (*hdr_off, absolute ring offset, *hdr_len bytes) and, for each extent so
 * far (sealed ones and the one being written), the ring offset of its
 * first body byte in off[i] and which body byte that is in pos[i].
 * Returns the number of extents (only max are written), 0 when the fill
 * is not open.  Marks the fill shared: a failure then never gives its
 * space back to the ring (a reader in another process may still be
 * sending from it), it becomes a hole. */
uint32_t cache_fill_where(struct cache_fill *f, uint64_t *hdr_off, uint32_t *hdr_len,
                          uint64_t *off, uint64_t *pos, uint32_t max);
/* Body bytes written so far by an open fill. */
uint64_t cache_fill_written(const struct cache_fill *f);
/* The meta an open fill commits (before the purge rule, cache_fill_since). */
const struct cache_meta *cache_fill_meta(const struct cache_fill *f);
/* A reader of another process's fill pins the segment holding ring offset
 * off: 0, or -1 (not pinned) when those bytes are no longer in the ring. */
int  cache_off_pin(struct cache *c, uint64_t off);
void cache_off_unpin(struct cache *c, uint64_t off);
/* The mapping at ring offset off (pinned by the caller). */
const void *cache_off_ptr(struct cache *c, uint64_t off);

/* Replace the header block (and meta: status, flags, stored, expires) of
 * the object stored under key, keeping its body where it is (RFC 9111
 * 4.3.4: a 304 refreshes the stored headers).  The body stays valid while
 * it is not lapped; the new header record is written at the head like any
 * record (checked before the index entry is updated).  A later lookup
 * returns the new header block and meta with the old body, both pinned.
 * Objects the caller holds stay valid (their bytes are never rewritten)
 * until released.  The entry is replaced only if it still serves the body
 * this call validated: never resurrects a removed object.  Returns
 * CACHE_OK, CACHE_MISS (no such object, or its body was lapped / damaged
 * or replaced meanwhile), CACHE_FULL, CACHE_TOOBIG, CACHE_INVAL,
 * CACHE_ERROR. */
int cache_update_headers(struct cache *c, const char *key, size_t keylen,
                         const struct cache_meta *meta, const void *hdr, size_t hdrlen);

/* The same, tied to the object the caller looked up and still holds
 * (held, from cache_lookup() of key): CACHE_MISS if the key no longer
 * serves held's body (a fill replaced it since the lookup), so headers
 * merged from held's 304 never land on another body.  What a worker
 * revalidating a held object should call.  CACHE_INVAL if held is not a
 * held object of key. */
int cache_obj_update_headers(struct cache *c, const struct cache_obj *held,
                             const char *key, size_t keylen,
                             const struct cache_meta *meta, const void *hdr,
                             size_t hdrlen);

/* PURGE: remove key.  CACHE_OK if an entry was removed, CACHE_MISS if
 * there was none, CACHE_ERROR. */
int cache_remove(struct cache *c, const char *key, size_t keylen);

/* Purge by key (exact keys: a soft PURGE), tag, key prefix, or all.
 * Hard: the objects' entries are removed.  Soft: their expiry becomes
 * now - 1 (stale: the next request revalidates; stale-while-revalidate
 * and stale-if-error apply as to any stale object); a 304 or a new fill
 * makes them fresh again.  Entries with a flag in skip_flags (the
 * caller's Vary markers) are removed by a hard purge, left alone by a
 * soft one, and never counted.  Write txns of a few hundred entries,
 * all committed and synced before the return: every process's next
 * lookup sees it (a purge that fails midway may have applied part), and it
 * survives a crash.  Returns the number of stored objects it applied to
 * (usable ones: not lapped, not damaged), or CACHE_FULL, CACHE_ERROR,
 * CACHE_INVAL.  Cost: proportional to the objects touched (O(k log n));
 * nothing is kept per purge. */
enum cache_purge_kind {
    CACHE_PURGE_KEY = 1,         /* arg: cache keys */
    CACHE_PURGE_TAG,             /* arg: tags (Surrogate-Key, Cache-Tag) */
    CACHE_PURGE_PREFIX,          /* arg: key prefixes */
    CACHE_PURGE_ALL,             /* no arg */
};
struct cache_purge_req {
    int                kind;     /* enum cache_purge_kind */
    int                nargs;    /* 1..1024 (ALL: ignored) */
    const char *const *arg;
    const size_t      *len;
    int                soft;
    int64_t            now;      /* unix seconds (soft) */
    uint16_t           skip_flags;
};
int64_t cache_purge(struct cache *c, const struct cache_purge_req *pr);

/* Cache manager housekeeping, call about once a second: sync LMDB to disk,
 * clear stale reader slots, evict at the index high-water mark, and sweep
 * (bounded batch) index entries whose bytes were overwritten or which need
 * verification after an unclean shutdown; and, as a backstop, prepare the
 * next segment for S3-FIFO eviction if no worker did.  Returns the number of entries
 * removed (>= 0) or CACHE_ERROR. */
int cache_manager_tick(struct cache *c);

/* Master, after reaping the process in `slot`: drop its pins, fold its
 * counters into the retired totals and clear them. */
void cache_slot_reset(void *shm_area, int slot);

/* Sync everything and record a clean shutdown, so the next start trusts
 * the index without verification.  Call from the last process with the
 * store open, after every other has closed it.  Returns CACHE_OK or
 * CACHE_ERROR. */
int cache_mark_clean_shutdown(struct cache *c);

/* The cache manager process's body (cache/manager.c), run in a child the
 * master forked into `slot` after its process set-up: open the store, tick
 * every second and whenever the master writes on pipe_r, until 'q' (mark the
 * clean shutdown, return 0) or EOF (the master died: return 1, no marker).
 * Returns the exit status for the process. */
int cache_manager_run(const struct cache_conf *cf, void *shm_area, int slot,
                      int pipe_r);

/* Sum the counters of every slot plus the retired totals. */
void cache_stats_sum(const void *shm_area, struct cache_stats *out);

/* Entries in the index (objects and Vary markers), or -1.  One read
 * transaction: for the stats pages, not for the request path. */
int64_t cache_objects(struct cache *c);

/* This process's counters (in shm). */
struct cache_counters *cache_counters(struct cache *c);

const char *cache_strerror(int rc);

#endif /* CISTERN_CACHE_H */
