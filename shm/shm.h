/*
 * shm/shm.h: the region shared by the master and every worker generation.
 *
 * One MAP_SHARED|MAP_ANONYMOUS mapping, created by the master before the
 * first fork and inherited by every child.  Layout:
 *
 *     struct shm_hdr    magic, layout version, sizes, reload status,
 *                       counters retired from dead slots
 *     struct shm_slot   [nslots]: one per process slot (workers of every
 *                       live generation, and the cache manager): its
 *                       counters and its busiest URLs (urltop.h)
 *     fill table        in-flight misses, for collapsed forwarding
 *     parent table      parent proxies' health (parenttab.h, issue 20)
 *     label table       the names of the per-rule and per-origin series
 *                       (labeltab.h, issue 25)
 *     cache area        [cache_len] bytes owned by cache/ (ring control,
 *                       pins, fill table), opaque here
 *
 * Ownership: a slot's counters are written only by the process in it, with
 * plain stores (no atomics on the hot path); readers sum over slots and
 * accept slightly stale values.  When the master reaps a process it folds
 * the slot's counters into hdr->retired before the slot is reused, so sums
 * never go backwards.  The master alone writes the header's control fields.
 */
#ifndef CISTERN_SHM_H
#define CISTERN_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shm/urltop.h"

#define SHM_MAGIC          0x43535348u    /* "CSSH" */
#define SHM_VERSION        4u
#define SHM_PANIC_LEN      256
#define SHM_RELOAD_MSG_LEN 512

/* Latency histograms (issue 25): per slot, written by its process with
 * plain increments like every counter here.  Fixed bucket upper bounds in
 * microseconds (shm_lat_bounds_us), the last bucket is +Inf; a bucket
 * holds the requests that fell in it (not cumulative: /_metrics sums). */
#define SHM_LAT_BUCKETS 15
enum shm_lat_kind { SHM_LAT_TOTAL = 0, SHM_LAT_TTFB, SHM_LAT_ORIGIN, SHM_LAT_KINDS };
enum shm_res { SHM_RES_HIT = 0, SHM_RES_MISS, SHM_RES_OTHER, SHM_RES_N };
extern const uint64_t shm_lat_bounds_us[SHM_LAT_BUCKETS - 1];
/* The bucket of a duration. */
unsigned shm_lat_bucket(uint64_t us);

/* Per remap rule and per origin host counters: indexes into the label
 * table (labeltab.h); index 0 is "other", where everything past the
 * table's bound is counted. */
#define SHM_RULES   64
#define SHM_OHOSTS  32
enum { SHM_RULE_REQ = 0, SHM_RULE_HIT, SHM_RULE_MISS, SHM_RULE_BYTES, SHM_RULE_ERR, SHM_RULE_N };
enum { SHM_OH_REQ = 0, SHM_OH_ERR, SHM_OH_CONNECTS, SHM_OH_CONNECT_US, SHM_OH_N };

/* Purge kinds (PURGE, POST /_purge, cistern ctl cache purge). */
enum shm_purge { SHM_PURGE_URL = 0, SHM_PURGE_TAG, SHM_PURGE_PREFIX, SHM_PURGE_HOST,
                 SHM_PURGE_ALL, SHM_PURGE_N };

/* Counters, one set per slot.  Keep every member a uint64_t: shm_sum()
 * treats the struct as an array. */
struct shm_counters {
    uint64_t conns_accepted;
    uint64_t conns_open;          /* gauge: folded as 0 when a slot retires */
    uint64_t requests;
    uint64_t resp_1xx, resp_2xx, resp_3xx, resp_4xx, resp_5xx;
    uint64_t bad_requests;        /* 4xx from the strict parser */
    uint64_t timeouts;
    uint64_t bytes_in, bytes_out;
    uint64_t origin_requests;
    uint64_t origin_errors;
    uint64_t origin_conns_opened;
    uint64_t origin_conns_reused;
    uint64_t conns_refused;       /* over connections_throttle */
    uint64_t log_lines;           /* access log lines written */
    uint64_t log_dropped;         /* access log lines dropped (buffer full) */
    uint64_t tls_handshakes;      /* client handshakes completed */
    uint64_t tls_resumed;         /* ...of which resumed a session (ticket) */
    uint64_t tls_handshake_errors;/* client handshakes that failed */
    uint64_t origin_tls_handshakes;
    uint64_t origin_tls_errors;   /* origin handshakes failed (verify...) */
    /* issue 18, ports */
    uint64_t pp_refused;          /* pp ports: connections closed for their
                                     PROXY header (peer not allowed,
                                     malformed, missing) */
    uint64_t tunnels_opened;      /* CONNECT and Upgrade tunnels begun */
    uint64_t tunnels_active;      /* gauge, like conns_open */
    uint64_t tunnel_bytes_up;     /* relayed client -> origin */
    uint64_t tunnel_bytes_down;   /* relayed origin -> client */
    uint64_t rww_joiners;         /* gauge: requests following a fill
                                     (worker/rww.c), like conns_open */
    uint64_t purges[SHM_PURGE_N]; /* purges answered, by kind (enum shm_purge) */
    uint64_t purges_soft;         /* ...of which soft */
    uint64_t purged_objects;      /* objects they removed or marked stale */
    /* issue 25: latency histograms by cache result, per-rule and
     * per-origin-host counters (see above) */
    uint64_t lat[SHM_LAT_KINDS][SHM_RES_N][SHM_LAT_BUCKETS];
    uint64_t lat_sum_us[SHM_LAT_KINDS][SHM_RES_N];
    uint64_t rule[SHM_RULES][SHM_RULE_N];
    uint64_t ohost[SHM_OHOSTS][SHM_OH_N];
};
#define SHM_NCOUNTERS (sizeof(struct shm_counters) / sizeof(uint64_t))

enum shm_slot_state {
    SHM_SLOT_FREE = 0,
    SHM_SLOT_STARTING,            /* forked, not yet serving */
    SHM_SLOT_READY,               /* accepting */
    SHM_SLOT_DRAINING,            /* stopped accepting, finishing work */
};

enum shm_slot_kind {
    SHM_KIND_WORKER = 0,
    SHM_KIND_MANAGER,
};

struct shm_slot {
    volatile pid_t    pid;
    volatile uint32_t generation;
    volatile int32_t  state;       /* enum shm_slot_state */
    volatile int32_t  kind;        /* enum shm_slot_kind */
    volatile int32_t  index;       /* worker index = listener index */
    volatile uint64_t heartbeat;   /* seconds, bumped by the worker's timer */
    struct shm_counters c;
    struct urltop     urls;        /* its busiest URLs (urltop.h) */
    char              panic[SHM_PANIC_LEN];   /* last words before abort */
} __attribute__((aligned(64)));

struct shm_hdr {
    uint32_t magic;
    uint32_t version;
    uint32_t nslots;
    uint32_t pad;
    uint64_t total_len;
    uint64_t cache_off, cache_len;
    /* reload status: written by the master only */
    volatile uint32_t generation;         /* current (newest ready) */
    volatile uint32_t reloads_ok;
    volatile uint32_t reloads_failed;
    volatile uint32_t worker_restarts;
    volatile int64_t  last_reload_time;
    char              last_reload_msg[SHM_RELOAD_MSG_LEN];
    volatile uint32_t ctl_drain;          /* `cistern ctl server drain`: every
                                             answer closes its connection */
    struct shm_counters retired;          /* folded from reaped slots */
    struct urltop     retired_urls;       /* merged from reaped slots */
};

struct filltab;
struct parenttab;
struct labeltab;

#define SHM_FILLTAB_ENTRIES 4096   /* in-flight misses tracked at once */

struct shm {
    struct shm_hdr  *hdr;
    struct shm_slot *slots;
    struct filltab  *filltab;         /* collapsed forwarding (filltab.h) */
    struct parenttab *parenttab;      /* parents' health (parenttab.h) */
    struct labeltab  *labeltab;       /* metric label names (labeltab.h) */
    void            *cache_area;
    size_t           len;
};

/* Create the region for nslots slots plus cache_len bytes for cache/.
 * Returns 0, or -1 with errno set. */
int  shm_create(struct shm *s, unsigned nslots, size_t cache_len);
void shm_destroy(struct shm *s);

/* Validate magic and version (a child calls this once after fork). */
int  shm_check(const struct shm *s);

/* Sum counters over the retired totals and every live slot. */
void shm_sum(const struct shm *s, struct shm_counters *out);

/* Fold slot i's counters into retired (its URL table into retired_urls)
 * and clear the slot (master, after reaping its process). */
void shm_slot_retire(struct shm *s, unsigned i);

/* Record the last words of this process in its slot (async-signal-safe). */
void shm_panic(struct shm_slot *slot, const char *msg);

#endif /* CISTERN_SHM_H */
