/*
 * cache/cache-int.h: what the files of cache/ share among themselves.
 * Not for use outside cache/ (t/unit/check_cache.c includes it to build
 * damaged stores on purpose).  Layouts are explained in cache/FORMAT.md;
 * every struct that lives on disk or in shared memory starts with a magic
 * and a version and is validated before use.
 *
 * Split:
 *   record.c  hashing, checksums, the record format (encode, validate)
 *   ring.c    the shared area: ring head, allocation mutex, pins, counters
 *   index.c   LMDB: env, entries, ring meta, sweeps, index-space eviction
 *   store.c   store files, prepare/open/close, clean shutdown
 *   lookup.c  the read path: lookup, release, remove; pin and verify
 *   fill.c    the write path: fills
 *   refresh.c header refresh (304)
 *   evict.c   S3-FIFO eviction, and the writers' reservation that drives it
 *   manager.c the cache manager's body and its housekeeping tick
 *   log.c     the log callback (cache_set_log)
 *
 * Calls go down this list's dependencies only: ring.c never calls eviction;
 * a writer reserves through cache_reserve (evict.c), which runs eviction
 * when the ring reports that the reservation entered a new segment.
 */
#ifndef CISTERN_CACHE_INT_H
#define CISTERN_CACHE_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <lmdb.h>

#include "cache/cache.h"

#define CACHE_HDR_SIZE     4096u        /* store header page at content offset 0 */
#define CACHE_REC_ALIGN    64u          /* record starts: scan resync step */
#define CACHE_BODY_SEED    0x62646f79ull /* body_sum seed: fixed, records stand alone */
#define CACHE_SEG_MAX      (64u << 20)  /* 64 MiB; stores under 512 MiB get smaller
                                           ones (>= 8).  Larger objects span
                                           segments (EXTENT + CHAIN records) */
#define CACHE_SEG_MIN      (64u << 10)
#define CACHE_NSEG_MIN     4u
#define CACHE_MAP_MIN      (1u << 20)

/* ------------------------------------------------------------------ */
/* Store header (content file, offset 0) */
#define CACHE_STORE_MAGIC   0x43535452u /* "CSTR" */
#define CACHE_STORE_VERSION 2u          /* 2: EXTENT and CHAIN records (objects span
                                           segments); a version 1 store is a valid
                                           version 2 store and is upgraded in place */
#define CACHE_STORE_VERSION_MIN 1u

struct cache_store_hdr {
    uint32_t magic;
    uint32_t version;
    uint64_t seg_size;
    uint32_t nseg;
    uint32_t clean;             /* 1 = shut down cleanly, 0 = in use / crashed */
    uint64_t file_size;         /* CACHE_HDR_SIZE + nseg * seg_size */
    uint64_t store_id;          /* random; the index must carry the same id */
    uint32_t epoch;             /* bumped at every prepare */
    uint32_t trust_epoch;       /* entries with epoch < this are verified before use */
    uint64_t hsum;              /* checksum of the fields above */
};

/* ------------------------------------------------------------------ */
/* Record (in a segment) */
#define CACHE_REC_MAGIC   0x43524543u   /* "CREC" */
#define CACHE_REC_VERSION 1u

enum cache_rec_type {
    CACHE_REC_OBJECT = 1,       /* header block + body */
    CACHE_REC_HEADERS = 2,      /* header block only; body in another record (304 refresh) */
    CACHE_REC_VARIANTS = 3,     /* list of variant key hashes (Vary) */
    CACHE_REC_HOLE = 4,         /* dead space left by a fill; skip rec_len */
    CACHE_REC_EXTENT = 5,       /* one piece of a large object's body (pad = its index);
                                 * extent 0 also carries the key and header block */
    CACHE_REC_CHAIN = 6,        /* a large object's head: key, header block, then the
                                 * table of its extents (pad = how many); newest of its
                                 * records, written at commit */
};

struct cache_rec {
    uint32_t magic;
    uint8_t  version;
    uint8_t  type;
    uint16_t flags;
    uint16_t status;
    uint16_t pad;
    uint32_t key_len;
    uint32_t hdr_len;
    uint32_t rec_len;           /* whole record incl. padding to CACHE_REC_ALIGN */
    uint64_t abs_off;           /* absolute ring offset it was written at */
    uint64_t body_len;
    int64_t  stored;
    int64_t  expires;
    uint8_t  key_hash[16];
    uint64_t body_sum;          /* checksum of the body */
    uint64_t head_sum;          /* this struct (head_sum = 0) + key + header block */
};                              /* followed by key, header block, body */
#define CACHE_REC_SIZE sizeof(struct cache_rec)

/* A HEADERS record's "body" area (unaligned: read it with
 * cache_rec_link_get): where the body it describes lives.  The
 * record's own body_len and body_sum are those of that body (they describe
 * the object); its rec_len counts the link instead.  head_sum covers the
 * link too, so a HEADERS record is checked by head_sum alone. */
struct cache_rec_link {
    uint64_t body_off;          /* absolute offset of the OBJECT record (older) */
    uint32_t body_rec_len;      /* that record's rec_len */
    uint32_t pad;
};
#define CACHE_LINK_SIZE sizeof(struct cache_rec_link)

/* Copy out the link of HEADERS record r (it follows key and header block:
 * unaligned). */
static inline void
cache_rec_link_get(const struct cache_rec *r, struct cache_rec_link *l)
{
    memcpy(l, (const uint8_t *)(r + 1) + r->key_len + r->hdr_len, sizeof(*l));
}

/* One entry of a CHAIN record's extent table (unaligned: read it with
 * cache_chain_ext).  Extents are listed in body order, oldest first. */
struct cache_ext {
    uint64_t off;               /* absolute offset of the EXTENT record */
    uint64_t body_len;          /* body bytes it holds */
    uint64_t body_sum;          /* and their checksum (== the record's) */
    uint32_t rec_len;           /* the record's rec_len */
    uint32_t skip;              /* its key_len + hdr_len: body at off + 88 + skip */
};
#define CACHE_EXT_SIZE sizeof(struct cache_ext)
#define CACHE_EXT_MAX  65535u   /* extents per object (the count lives in pad) */

/* The i-th entry of CHAIN record r's table. */
static inline void
cache_chain_ext(const struct cache_rec *r, uint32_t i, struct cache_ext *x)
{
    memcpy(x, (const uint8_t *)(r + 1) + r->key_len + r->hdr_len + (size_t)i * CACHE_EXT_SIZE,
           sizeof(*x));
}

/* Bytes after struct cache_rec that head_sum covers. */
static inline size_t
cache_rec_sumlen(const struct cache_rec *r)
{
    return (size_t)r->key_len + r->hdr_len
           + (r->type == CACHE_REC_HEADERS ? CACHE_LINK_SIZE : 0)
           + (r->type == CACHE_REC_CHAIN ? (size_t)r->pad * CACHE_EXT_SIZE : 0);
}

/* ------------------------------------------------------------------ */
/* Index value (LMDB "obj" DB; key = 16-byte key hash) */
#define CACHE_ENT_MAGIC   0x43454e54u   /* "CENT" */
#define CACHE_ENT_VERSION 1u

enum cache_ent_type {
    CACHE_ENT_OBJECT = 1,       /* off = header record, body_off = body record;
                                 * off != body_off: off is a HEADERS record
                                 * (rec_len, hdr_len are its own) */
    CACHE_ENT_VARIANTS = 2,     /* off = a CACHE_REC_VARIANTS record */
};

struct cache_ent {
    uint32_t magic;
    uint8_t  version;
    uint8_t  type;
    uint16_t flags;
    uint16_t status;
    uint16_t pad;
    uint32_t epoch;             /* store epoch it was written or last verified in */
    uint32_t rec_len;
    uint32_t hdr_len;
    uint32_t key_len;
    uint64_t off;
    uint64_t body_off;          /* == off while headers and body share a record,
                                 * else the older OBJECT record (< off) */
    uint64_t body_len;
    int64_t  stored;
    int64_t  expires;
};

/* Ring position (LMDB "meta" DB, key "ring"), committed with the entries */
#define CACHE_RINGMETA_MAGIC 0x4352474du /* "CRGM" */
struct cache_ringmeta {
    uint32_t magic;
    uint32_t version;
    uint64_t store_id;
    uint64_t cur_seg;           /* absolute number of the segment being written */
    uint64_t head;              /* next free absolute byte, inside cur_seg */
    uint64_t floor;             /* entries below this absolute offset are evicted */
};

/* ------------------------------------------------------------------ */
/* Shared area */
#define CACHE_SHM_MAGIC   0x4353484du   /* "CSHM" */
#define CACHE_SHM_VERSION 3u

/* Frequency table (S3-FIFO, FORMAT.md "Eviction"): one saturating byte
 * counter per hashed key, bumped on hits; a record is rewritten at the
 * head when its counter is >= CACHE_FREQ_HOT as the head reaches it, and
 * the rewrite costs it one.  Max 3 as in S3-FIFO's two-bit counters: an
 * object nobody asks for any more survives at most three more laps. */
#define CACHE_FREQ_MAX      3u          /* 2 bits; see ring.c for the 6-bit tag */
#define CACHE_FREQ_HOT      1u
#define CACHE_FREQ_PER      4096u       /* one counter per 4 KiB of content */
#define CACHE_FREQ_MIN      4096u       /* counters, at least */
#define CACHE_FREQ_CAP      (1u << 25)  /* and at most 32 MiB of shm */

struct cache_shm {
    uint32_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t nseg;
    uint64_t seg_size;
    uint64_t len;
    uint32_t pin_words;         /* uint64_t words per slot bitmap */
    uint32_t pad;
    uint64_t counters_off;      /* struct cache_counters [nslots] */
    uint64_t pins_off;          /* uint64_t [nslots][pin_words] */
    uint64_t freq_off;          /* uint8_t [freq_mask + 1]: hit counters */
    uint64_t freq_mask;         /* counters - 1 (a power of two) */
    uint32_t eviction;          /* enum cache_eviction */
    uint32_t pad2;
    pthread_mutex_t alloc_mx;   /* robust, process-shared: ring allocation */
    /* Ring control: written under alloc_mx, read lock-free (seq_cst). */
    uint64_t cur_seg;
    uint64_t head;
    uint64_t floor;
    uint64_t store_id;          /* which store they describe; 0 = not loaded yet */
    uint32_t epoch;
    uint32_t trust_epoch;
    /* Eviction: the absolute segment whose slot was last prepared (its
     * hot records rewritten at the head), claimed by compare-and-swap so
     * one process prepares each segment. */
    uint64_t evict_next;
    struct cache_counters retired;
    /* Purges begun (purge.c): a fill open across one is stored stale. */
    uint64_t purge_gen;
};

/* ------------------------------------------------------------------ */
struct cache_geom {
    uint64_t seg_size;
    uint32_t nseg;
    uint64_t file_size;
    size_t   mapsize;
};

#define CACHE_MAGIC      0x43414348u    /* "CACH" */
#define CACHE_FILL_MAGIC 0x4346494cu    /* "CFIL" */

enum cache_fill_state { FILL_FREE = 0, FILL_OPEN, FILL_DEAD };

struct cache_fill {
    uint32_t       magic;
    int            state;
    struct cache  *c;
    uint8_t        hash[16];
    struct cache_meta meta;
    uint32_t       key_len;
    uint32_t       hdr_len;
    int64_t        want;        /* announced body length, -1 unknown */
    uint64_t       body_len;    /* written so far */
    uint64_t       off;         /* absolute offset of the record */
    uint64_t       ext_len;     /* bytes reserved at off */
    uint32_t       seg;         /* pinned segment (slot number) */
    int            pinned;
    /* An object larger than a segment: off/ext_len/seg are the extent
     * being written; the sealed ones (still pinned) are in ext[0..next). */
    uint64_t       xbody;       /* body bytes in the current extent */
    uint32_t       xskip;       /* key + header bytes in it (extent 0 only) */
    uint32_t       next;        /* sealed extents */
    uint32_t       next_cap;
    int            chain;       /* 1 once the body left its first extent */
    int            shared;      /* read while written: never trimmed on failure */
    struct cache_ext *ext;      /* malloc'd; freed when the slot is released */
    uint64_t       purge_gen;   /* cache_purge_gen() when the fill began */
};

struct cache {
    uint32_t        magic;
    int             slot;
    struct cache_conf conf;
    char           *dir;
    struct cache_geom g;
    struct cache_shm *shm;
    struct cache_counters *ctr;
    uint64_t       *mypins;     /* this slot's bitmap in shm */
    uint32_t       *pincount;   /* this process's pins per segment */
    int             fd;
    uint8_t        *map;        /* whole content file */
    size_t          maplen;
    uint8_t        *ring;       /* map + CACHE_HDR_SIZE */
    uint64_t        store_id;
    uint32_t        epoch;
    uint64_t        max_doc;
    MDB_env        *env;
    MDB_dbi         dbi_obj;
    MDB_dbi         dbi_meta;
    MDB_dbi         dbi_tag;    /* purge tables (purge.c) */
    MDB_dbi         dbi_key;
    MDB_dbi         dbi_rev;
    int             idx_usage;  /* permille at this process's last check */
    unsigned        pix_flip;   /* index_evict: which order the next run takes */
    size_t          pix_resume_len;
    uint8_t         pix_resume[512];    /* pkey key the next pkey-order run starts at */
    MDB_txn        *rtxn;       /* reset between uses */
    uint8_t         sweep_key[16];
    int             sweep_have_key;
    unsigned        puts;       /* index puts by this process */
    struct cache_fill *fills;
    int             nfills;
};

/* ---- record.c ---- */
uint64_t cache_hash64(const void *p, size_t n, uint64_t seed);
uint64_t cache_rec_total(uint32_t key_len, uint32_t hdr_len, uint64_t body_len);
void     cache_rec_seal(struct cache_rec *r, const uint8_t *tail, size_t taillen);
int      cache_rec_check(const struct cache_rec *r, uint64_t abs_off, uint64_t room,
                         const char *why[1]);
uint64_t cache_store_hdr_sum(const struct cache_store_hdr *h);

/* ---- ring.c ---- */
int      cache_geom_compute(const struct cache_conf *cf, struct cache_geom *g);
struct cache_shm *cache_shm_get(void *area);
int      cache_ring_lock(struct cache_shm *s);
void     cache_ring_unlock(struct cache_shm *s);
/* Reserve len bytes at the head (pinned for the caller).  *entered is set
 * to 1 when the reservation moved the head into a new segment (the caller
 * may then prepare the next one: cache_reserve does), else 0. */
int      cache_ring_reserve(struct cache *c, uint64_t len, uint64_t *off, int *entered);
int      cache_ring_extend(struct cache *c, uint64_t off, uint64_t old_len,
                           uint64_t new_len);
int      cache_ring_trim(struct cache *c, uint64_t off, uint64_t old_len,
                         uint64_t new_len);
int      cache_ring_alive(const struct cache_shm *s, uint64_t off);
void     cache_pin(struct cache *c, uint32_t seg);
void     cache_unpin(struct cache *c, uint32_t seg);
uint64_t *cache_slot_pins(struct cache_shm *s, int slot);
struct cache_counters *cache_slot_counters(struct cache_shm *s, int slot);

static inline uint32_t
cache_seg_of(const struct cache_shm *s, uint64_t abs_off)
{
    return (uint32_t)((abs_off / s->seg_size) % s->nseg);
}

#define CTR_ADD(c, field, n) \
    __atomic_store_n(&(c)->ctr->field, (c)->ctr->field + (n), __ATOMIC_RELAXED)

/* Where absolute offset abs_off lives in the mapping. */
static inline uint8_t *
cache_ring_ptr(const struct cache *c, uint64_t abs_off)
{
    return c->ring + (uint64_t)cache_seg_of(c->shm, abs_off) * c->g.seg_size
           + abs_off % c->g.seg_size;
}

uint32_t cache_freq_get(const struct cache *c, const uint8_t hash[16]);
void     cache_freq_bump(const struct cache *c, const uint8_t hash[16]);
uint32_t cache_freq_decay(const struct cache *c, const uint8_t hash[16]);
void     cache_freq_clear(const struct cache *c, const uint8_t hash[16]);

/* ---- evict.c ---- */
/* A writer's reservation (fills, refreshes): cache_ring_reserve, then, when
 * it entered a new segment, cache_evict_ahead.  Same returns. */
int      cache_reserve(struct cache *c, uint64_t len, uint64_t *off);
int      cache_evict_ahead(struct cache *c);
int      cache_evict_segment(struct cache *c, uint64_t abs_seg);

/* ---- fill.c ---- */
void     cache_write_hole(struct cache *c, uint64_t off, uint64_t len);

/* ---- index.c ---- */
/* One compare-and-swap of a relocation batch (cache_index_swap). */
struct cache_swap {
    uint8_t          hash[16];
    uint64_t         old_off;       /* the entry must still be (off, body_off) */
    uint64_t         old_body_off;
    struct cache_ent ne;            /* ... and then becomes this */
    int              done;          /* out: 1 swapped, 0 condition failed */
};
int      cache_index_swap(struct cache *c, struct cache_swap *sw, int n);

int      cache_index_open(struct cache *c, int create, char *err, size_t errlen);
void     cache_index_close(struct cache *c);
int      cache_index_get(struct cache *c, const uint8_t hash[16], struct cache_ent *e);
int      cache_index_put(struct cache *c, const uint8_t hash[16],
                         const struct cache_ent *e, int *replaced);
int      cache_index_put_if(struct cache *c, const uint8_t hash[16],
                            const struct cache_ent *e, uint64_t body_off);
int      cache_index_del(struct cache *c, const uint8_t hash[16],
                         const struct cache_ent *only_if);
int      cache_index_load_ring(struct cache *c, struct cache_ringmeta *m);
int      cache_index_save_ring(struct cache *c);
int      cache_index_sweep(struct cache *c, int budget);
int      cache_index_evict(struct cache *c);
int      cache_index_highwater(struct cache *c);
int      cache_index_wipe(const char *dir);
int      cache_ent_valid(const struct cache_ent *e);

/* ---- purge.c: the purge tables, kept in the txn that changes obj ---- */
/* Open (create) ptag, pkey, prev in txn.  0 or an LMDB error. */
int      cache_pix_open(struct cache *c, MDB_txn *txn);
/* Entry e was put under hash: replace hash's rows by those of the record
 * at e->off (its key; the tags of its header block).  0 or an LMDB error. */
int      cache_pix_set(struct cache *c, MDB_txn *txn, const uint8_t hash[16],
                       const struct cache_ent *e);
/* hash's entry was deleted: drop its rows.  0 or an LMDB error. */
int      cache_pix_forget(struct cache *c, MDB_txn *txn, const uint8_t hash[16]);
/* Prepare: build the tables by a walk of the index (records read from fd)
 * unless meta "pix" says they are of this version.  CACHE_OK/CACHE_ERROR. */
int      cache_pix_upgrade(struct cache *c, int fd);
/* Up to max live-or-not entries in pkey's order (index eviction's run):
 * their hashes and offsets.  Returns how many. */
int      cache_pix_run(struct cache *c, int max, uint8_t (*hash)[16], uint64_t *off);
/* Pages the three tables use (index_usage). */
uint64_t cache_pix_pages(struct cache *c, MDB_txn *txn);
/* The tags of header block blk (at most max; pointers into blk). */
int      cache_pix_tags(const char *blk, size_t len, const char **tag, uint8_t *taglen,
                        int max);

/* ---- lookup.c ---- */
int      cache_ent_verify(struct cache *c, const struct cache_ent *e,
                          const uint8_t hash[16], const char *key, size_t keylen,
                          int want_body_sum, const struct cache_rec **hout,
                          const struct cache_rec **bout);
void     cache_ent_for_rec(const struct cache *c, struct cache_ent *e,
                           const struct cache_rec *r, uint64_t off, uint64_t body_off);
int      cache_ent_pinned_ok(struct cache *c, const struct cache_ent *e,
                             const uint8_t hash[16], const char *key, size_t keylen,
                             const struct cache_rec **h, const struct cache_rec **b);
int      cache_ent_pin(struct cache *c, const struct cache_ent *e);
const struct cache_rec *cache_ent_chain(const struct cache *c, const struct cache_ent *e);
void     cache_ent_unpin(struct cache *c, const struct cache_ent *e);

/* ---- logging: through the callback of cache_set_log() (cache/log.c) ---- */
void cache_log(enum cache_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define cache_log_info(...)  cache_log(CACHE_LOG_INFO, __VA_ARGS__)
#define cache_log_warn(...)  cache_log(CACHE_LOG_WARN, __VA_ARGS__)
#define cache_log_error(...) cache_log(CACHE_LOG_ERROR, __VA_ARGS__)

#endif /* CISTERN_CACHE_INT_H */
