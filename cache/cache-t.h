/*
 * cache/cache-t.h: the types of the cache's public API (no functions).
 *
 * Everything a caller fills in or reads back: the store configuration,
 * the metadata of an object being stored, a looked-up object (iovecs that
 * point straight into the shared content mapping), the counters, and the
 * one vocabulary of return codes.  The on-disk and shared-memory layouts
 * are private to cache/ and described in cache/FORMAT.md.
 */
#ifndef CISTERN_CACHE_T_H
#define CISTERN_CACHE_T_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

/* Return codes: 0 is success, everything else is negative. */
enum cache_rc {
    CACHE_OK = 0,
    CACHE_MISS = -1,      /* nothing (usable) stored under the key */
    CACHE_ERROR = -2,     /* system or LMDB error; logged */
    CACHE_FULL = -3,      /* no ring space or index space right now */
    CACHE_TOOBIG = -4,    /* object larger than the largest cacheable one */
    CACHE_BUSY = -5,      /* every fill slot of this process is in use */
    CACHE_ABORTED = -6,   /* the fill was overtaken (lapped) or abandoned */
    CACHE_INVAL = -7,     /* bad argument */
};

/* Where and how big the store is (storage.config), plus tunables.  The
 * same values must be given to cache_shm_size(), cache_shm_init(),
 * cache_store_prepare() and cache_open(): the geometry derives from them. */
struct cache_conf {
    const char *dir;             /* store directory (created if missing) */
    int64_t     size;            /* bytes for index + content together */
    int64_t     max_doc_size;    /* proxy.config.cache.max_doc_size; 0 = a quarter of the store */
    size_t      index_mapsize;   /* LMDB map size; 0 = size / 32, at least 1 MiB */
    int         verify;          /* 1 = verify the body checksum on every hit (debug) */
    int         max_fills;       /* concurrent fills per process; 0 = 256 */
    int         eviction;        /* enum cache_eviction; 0 = the default (S3-FIFO) */
};

/* What happens to the records of a segment the write head is about to
 * enter (FORMAT.md, "Eviction").  Read from the conf given to
 * cache_shm_init(): one policy per shared area. */
enum cache_eviction {
    CACHE_EVICT_S3FIFO = 0,      /* hot, fresh records are rewritten at the head */
    CACHE_EVICT_FIFO = 1,        /* plain ring: everything in the segment goes */
};

/* Metadata stored with an object (and returned by a lookup). */
struct cache_meta {
    uint16_t status;             /* HTTP status of the stored response */
    uint16_t flags;              /* CACHE_F_*; opaque to the store beyond these */
    int64_t  stored;             /* unix seconds the response was received */
    int64_t  expires;            /* unix seconds it goes stale; 0 = unknown */
};

/* Flags in cache_meta.flags are the caller's (HTTP layer) to define, except
 * the high byte which the store reserves. */
#define CACHE_F_STORE_MASK 0xff00u

#define CACHE_OBJ_MAGIC 0x434f424au      /* "COBJ" */

/* A hit.  While it is held (between cache_lookup() == CACHE_OK and
 * cache_obj_release()) the segments holding the bytes are pinned: no writer
 * enters them, so iov[] may be handed to writev() across event-loop turns.
 * iov[0] is the stored header block, iov[1] the body (for an object larger
 * than a segment, only its first extent: cache_obj_span() gives the rest).
 * After a header
 * refresh (cache_update_headers) the two live in different records, and
 * possibly different segments: both are pinned. */
struct cache_obj {
    uint32_t          magic;
    struct iovec      iov[2];
    struct cache_meta meta;
    uint64_t          body_len;
    uint32_t          hdr_len;
    uint8_t           key_hash[16];
    /* private to cache/ */
    uint32_t          co_seg;       /* segment of the header record */
    uint32_t          co_body_seg;  /* segment of the body record */
    int               co_pinned;    /* pins held: 0, 1 (one record), 2, 3 (a chain) */
    uint64_t          co_body_off;  /* body record: which body a refresh applies to */
    uint64_t          co_off;       /* header record */
    const void       *co_chain;     /* a large object's CHAIN record (pinned), or NULL */
};

/* Per-slot counters, written only by the process in the slot. */
struct cache_counters {
    uint64_t hits;
    uint64_t misses;
    uint64_t bytes_served;        /* header block + body bytes of hits */
    uint64_t fills;               /* committed */
    uint64_t fill_failures;       /* refused, aborted or failed to commit */
    uint64_t bytes_written;       /* record bytes committed */
    uint64_t evictions;           /* index entries dropped (lapped, evicted, damaged) */
    uint64_t corrupt;             /* records that failed validation */
    uint64_t relocations;         /* hot objects rewritten at the head (S3-FIFO) */
    uint64_t bytes_relocated;     /* record bytes those rewrites wrote */
} __attribute__((aligned(64)));
#define CACHE_NCOUNTERS 10

struct cache_stats {
    struct cache_counters c;      /* retired + every slot */
    uint64_t store_bytes;         /* content ring size */
    uint64_t store_bytes_used;    /* ring bytes holding live records (approx.) */
    uint64_t segments;
    uint64_t segment_size;
};

#endif /* CISTERN_CACHE_T_H */
