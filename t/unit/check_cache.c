/*
 * t/unit/check_cache.c: unit tests of the cache store (cache/).
 *
 * Each test builds a private store under a mkdtemp() directory, with its
 * own MAP_SHARED anonymous area standing in for the master's region.
 * Damage is done the way it happens in life: through the files, with the
 * store closed (pwrite, ftruncate, or LMDB opened directly), then the
 * store is prepared and opened again as a restarted daemon would.
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <lmdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/cache-int.h"

#define MiB (1024 * 1024)
#define NSLOTS 8

struct env {
    char              dir[64];
    struct cache_conf cf;
    void             *area;
    size_t            arealen;
    struct cache     *c;
};

static struct env E;

static void
env_shm(void)
{
    E.arealen = cache_shm_size(&E.cf, NSLOTS);
    ck_assert_uint_gt(E.arealen, 0);
    E.area = mmap(NULL, E.arealen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
    ck_assert_ptr_ne(E.area, MAP_FAILED);
    ck_assert_int_eq(cache_shm_init(E.area, E.arealen, &E.cf, NSLOTS), CACHE_OK);
}

static void
env_open(void)
{
    char err[256] = "";

    ck_assert_msg(cache_store_prepare(&E.cf, err, sizeof(err)) == CACHE_OK, "%s", err);
    E.c = cache_open(&E.cf, E.area, 0, err, sizeof(err));
    ck_assert_msg(E.c != NULL, "%s", err);
}

/* Close everything and start again as a restarted daemon: new shm. */
static void
env_restart(int clean)
{
    if (clean)
        ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
}

static void
env_setup_conf(int64_t size, size_t mapsize, int verify)
{
    memset(&E, 0, sizeof(E));
    strcpy(E.dir, "/tmp/check_cache.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(E.dir));
    E.cf.dir = E.dir;
    E.cf.size = size;
    E.cf.index_mapsize = mapsize;
    E.cf.verify = verify;
    env_shm();
    env_open();
}

static void
setup(void)
{
    setenv("CACHE_TEST_QUIET", "1", 0);
    env_setup_conf(16 * MiB, 0, 0);
}

static int
rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static void
teardown(void)
{
    if (E.c)
        cache_close(E.c);
    E.c = NULL;
    if (E.area)
        munmap(E.area, E.arealen);
    E.area = NULL;
    nftw(E.dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ------------------------------------------------------------------ */

static uint8_t
pat(unsigned seed, size_t i)
{
    return (uint8_t)((seed * 131u + i * 7u + (i >> 8)) & 0xff);
}

static void
fill_pat(uint8_t *buf, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pat(seed, i);
}

static int
put_obj(struct cache *c, const char *key, size_t len, unsigned seed, int known)
{
    static uint8_t buf[8 * MiB];
    struct cache_meta m = { 200, 0, 1000, 2000 };
    struct cache_fill *f;
    char hdr[64];
    int rc, n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", seed);

    ck_assert_uint_le(len, sizeof(buf));
    fill_pat(buf, len, seed);
    rc = cache_fill_begin(c, key, strlen(key), &m, hdr, (size_t)n,
                          known ? (int64_t)len : -1, &f);
    if (rc != CACHE_OK)
        return rc;
    for (size_t o = 0; o < len;) {
        size_t k = len - o > 7000 ? 7000 : len - o;
        if ((rc = cache_fill_write(f, buf + o, k)) != CACHE_OK) {
            cache_fill_abort(f);
            return rc;
        }
        o += k;
    }
    return cache_fill_commit(f, NULL);
}

/* CACHE_OK when key is a hit with exactly the expected bytes. */
static int
get_obj(struct cache *c, const char *key, size_t len, unsigned seed)
{
    struct cache_obj o;
    char hdr[64];
    int n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", seed);
    int rc = cache_lookup(c, key, strlen(key), &o);

    if (rc != CACHE_OK)
        return rc;
    ck_assert_uint_eq(o.iov[0].iov_len, (size_t)n);
    ck_assert(memcmp(o.iov[0].iov_base, hdr, (size_t)n) == 0);
    ck_assert_uint_eq(o.body_len, len);
    /* span by span: a large object's body is in several extents */
    for (size_t i = 0; i < len;) {
        const void *p;
        size_t k = cache_obj_span(c, &o, i, &p);

        ck_assert_uint_gt(k, 0);
        if (i == 0)
            ck_assert(p == o.iov[1].iov_base && k == o.iov[1].iov_len);
        for (size_t j = 0; j < k; j++)
            if (((const uint8_t *)p)[j] != pat(seed, i + j))
                ck_abort_msg("%s: byte %zu differs", key, i + j);
        i += k;
    }
    ck_assert_int_eq(o.meta.status, 200);
    ck_assert_int_eq(o.meta.stored, 1000);
    ck_assert_int_eq(o.meta.expires, 2000);
    cache_obj_release(c, &o);
    return CACHE_OK;
}

/* File offset of key's record (object must be a hit). */
static off_t
rec_file_off(struct cache *c, const char *key)
{
    struct cache_obj o;
    uint8_t *rec;

    ck_assert_int_eq(cache_lookup(c, key, strlen(key), &o), CACHE_OK);
    rec = (uint8_t *)o.iov[0].iov_base - strlen(key) - CACHE_REC_SIZE;
    cache_obj_release(c, &o);
    return (off_t)(rec - c->map);
}

static void
content_pwrite(const void *p, size_t n, off_t off)
{
    char path[128];
    int fd;

    snprintf(path, sizeof(path), "%s/content", E.dir);
    fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

/* Open the index directly (store closed) and let fn edit entry `hash`. */
static void
raw_edit(const uint8_t hash[16], void (*fn)(MDB_txn *, MDB_dbi, const uint8_t *, void *),
         void *arg, size_t mapsize)
{
    MDB_env *env;
    MDB_txn *txn;
    MDB_dbi dbi;
    char path[128];

    snprintf(path, sizeof(path), "%s/index", E.dir);
    ck_assert_int_eq(mdb_env_create(&env), 0);
    mdb_env_set_maxdbs(env, 2);
    mdb_env_set_mapsize(env, mapsize);
    ck_assert_int_eq(mdb_env_open(env, path, MDB_NOTLS, 0600), 0);
    ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
    ck_assert_int_eq(mdb_dbi_open(txn, "obj", 0, &dbi), 0);
    fn(txn, dbi, hash, arg);
    ck_assert_int_eq(mdb_txn_commit(txn), 0);
    mdb_env_close(env);
}

static void
edit_copy_from(MDB_txn *txn, MDB_dbi dbi, const uint8_t *hash, void *arg)
{
    MDB_val k = { 16, (void *)arg }, v, k2 = { 16, (void *)hash };
    ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
    ck_assert_int_eq(mdb_put(txn, dbi, &k2, &v, 0), 0);
}

static void
edit_body_len(MDB_txn *txn, MDB_dbi dbi, const uint8_t *hash, void *arg)
{
    MDB_val k = { 16, (void *)hash }, v;
    struct cache_ent e;
    (void)arg;
    ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
    memcpy(&e, v.mv_data, sizeof(e));
    e.body_len += 1;
    v.mv_data = &e;
    ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
}

static void
edit_rec_len(MDB_txn *txn, MDB_dbi dbi, const uint8_t *hash, void *arg)
{
    MDB_val k = { 16, (void *)hash }, v;
    struct cache_ent e;
    (void)arg;
    ck_assert_int_eq(mdb_get(txn, dbi, &k, &v), 0);
    memcpy(&e, v.mv_data, sizeof(e));
    e.rec_len = 1u << 30;
    v.mv_data = &e;
    ck_assert_int_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
}

/* ------------------------------------------------------------------ */

START_TEST(test_geometry)
{
    struct cache_geom g;
    struct cache_conf cf = { .dir = "/x", .size = 16 * MiB };

    ck_assert_int_eq(cache_geom_compute(&cf, &g), 0);
    ck_assert_uint_eq(g.seg_size, 1 * MiB);
    ck_assert_uint_eq(g.nseg, 14);
    ck_assert_uint_eq(g.mapsize, 1 * MiB);
    cf.size = 256 * MiB;    /* a 10 MB object must fit (issue: PUSH 10 MB) */
    ck_assert_int_eq(cache_geom_compute(&cf, &g), 0);
    ck_assert_uint_eq(g.seg_size, 16 * MiB);
    ck_assert_uint_ge(g.nseg, 8);
    cf.size = 100LL << 30;
    ck_assert_int_eq(cache_geom_compute(&cf, &g), 0);
    ck_assert_uint_eq(g.seg_size, 64 * MiB);
    cf.size = 1 * MiB;
    ck_assert_int_lt(cache_geom_compute(&cf, &g), 0);
    ck_assert_uint_eq(cache_shm_size(&cf, 4), 0);
    /* objects span segments: a quarter of the ring (14 segments of 1 MiB) */
    ck_assert_int_eq(cache_max_doc_size(E.c), (int64_t)(14 * MiB / 4));
}
END_TEST

START_TEST(test_roundtrip)
{
    struct cache_stats st;
    int replaced = -1;
    struct cache_fill *f;
    struct cache_meta m = { 404, 3, 5, 6 };
    struct cache_obj o;

    ck_assert_int_eq(get_obj(E.c, "http://a/1", 10, 1), CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "http://a/1", 10, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "http://a/2", 100000, 2, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "http://a/3", 0, 3, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "http://a/1", 10, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "http://a/2", 100000, 2), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "http://a/3", 0, 3), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "http://a/", 0, 3), CACHE_MISS);

    /* replace: newest wins, commit reports it */
    ck_assert_int_eq(cache_fill_begin(E.c, "http://a/1", 10, &m, "H", 1, 2, &f), CACHE_OK);
    ck_assert_int_eq(cache_fill_write(f, "ok", 2), CACHE_OK);
    ck_assert_int_eq(cache_fill_commit(f, &replaced), CACHE_OK);
    ck_assert_int_eq(replaced, 1);
    ck_assert_int_eq(cache_lookup(E.c, "http://a/1", 10, &o), CACHE_OK);
    ck_assert_int_eq(o.meta.status, 404);
    ck_assert_int_eq(o.meta.flags, 3);
    ck_assert_uint_eq(o.iov[1].iov_len, 2);
    ck_assert(memcmp(o.iov[1].iov_base, "ok", 2) == 0);
    cache_obj_release(E.c, &o);
    cache_obj_release(E.c, &o);         /* idempotent */

    ck_assert_int_eq(cache_remove(E.c, "http://a/1", 10), CACHE_OK);
    ck_assert_int_eq(cache_remove(E.c, "http://a/1", 10), CACHE_MISS);
    ck_assert_int_eq(cache_lookup(E.c, "http://a/1", 10, &o), CACHE_MISS);

    cache_stats_sum(E.area, &st);
    ck_assert_uint_eq(st.c.fills, 4);
    ck_assert_uint_ge(st.c.hits, 4);
    ck_assert_uint_ge(st.c.misses, 3);
    ck_assert_uint_gt(st.store_bytes_used, 100000);

    /* a probe finds what a lookup finds, and counts in no counter */
    struct cache_stats st2;
    uint8_t h[16];
    cache_key_hash(E.c, "http://a/2", 10, h);
    ck_assert_int_eq(cache_probe_hashed(E.c, "http://a/2", 10, h, &o), CACHE_OK);
    ck_assert_uint_eq(o.body_len, 100000);
    cache_obj_release(E.c, &o);
    cache_key_hash(E.c, "http://a/1", 10, h);
    ck_assert_int_eq(cache_probe_hashed(E.c, "http://a/1", 10, h, &o), CACHE_MISS);
    cache_stats_sum(E.area, &st2);
    ck_assert_uint_eq(st2.c.hits, st.c.hits);
    ck_assert_uint_eq(st2.c.misses, st.c.misses);
    ck_assert_uint_eq(st2.c.bytes_served, st.c.bytes_served);
    ck_assert_str_eq(cache_strerror(CACHE_TOOBIG), "object too large for the cache");
}
END_TEST

START_TEST(test_unknown_length_and_limits)
{
    struct cache_fill *f, *g;
    struct cache_meta m = { 200, 0, 1000, 2000 };
    uint8_t buf[5000];
    int64_t max = cache_max_doc_size(E.c);

    /* Two unknown-length fills growing at once: one must relocate. */
    ck_assert_int_eq(cache_fill_begin(E.c, "u1", 2, &m, "X-Seed: 7\r\n", 11, -1, &f), CACHE_OK);
    ck_assert_int_eq(cache_fill_begin(E.c, "u2", 2, &m, "X-Seed: 8\r\n", 11, -1, &g), CACHE_OK);
    for (size_t o = 0; o < 300000; o += sizeof(buf)) {
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = pat(7, o + i);
        ck_assert_int_eq(cache_fill_write(f, buf, sizeof(buf)), CACHE_OK);
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = pat(8, o + i);
        ck_assert_int_eq(cache_fill_write(g, buf, sizeof(buf)), CACHE_OK);
    }
    ck_assert_int_eq(cache_fill_commit(g, NULL), CACHE_OK);
    ck_assert_int_eq(cache_fill_commit(f, NULL), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "u1", 300000, 7), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "u2", 300000, 8), CACHE_OK);

    /* too big, known and unknown */
    ck_assert_int_eq(cache_fill_begin(E.c, "big", 3, &m, NULL, 0, max + 1, &f), CACHE_TOOBIG);
    ck_assert_int_eq(put_obj(E.c, "big", (size_t)max + 100, 1, 0), CACHE_TOOBIG);
    ck_assert_int_eq(get_obj(E.c, "big", 0, 1), CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "max", (size_t)max - 64, 9, 0), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "max", (size_t)max - 64, 9), CACHE_OK);

    /* more than announced, short body, abort: never visible */
    ck_assert_int_eq(cache_fill_begin(E.c, "k1", 2, &m, NULL, 0, 4, &f), CACHE_OK);
    ck_assert_int_eq(cache_fill_write(f, "12345", 5), CACHE_TOOBIG);
    ck_assert_int_eq(cache_fill_write(f, "1", 1), CACHE_ABORTED);
    cache_fill_abort(f);
    ck_assert_int_eq(cache_fill_begin(E.c, "k2", 2, &m, NULL, 0, 4, &f), CACHE_OK);
    ck_assert_int_eq(cache_fill_write(f, "12", 2), CACHE_OK);
    ck_assert_int_eq(cache_fill_commit(f, NULL), CACHE_ABORTED);
    ck_assert_int_eq(cache_fill_begin(E.c, "k3", 2, &m, NULL, 0, -1, &f), CACHE_OK);
    ck_assert_int_eq(cache_fill_write(f, "12", 2), CACHE_OK);
    cache_fill_abort(f);
    ck_assert_int_eq(get_obj(E.c, "k1", 0, 0), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "k2", 0, 0), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "k3", 0, 0), CACHE_MISS);
    ck_assert_int_eq(cache_fill_begin(E.c, "", 0, &m, NULL, 0, 4, &f), CACHE_INVAL);
}
END_TEST

START_TEST(test_fill_slots)
{
    struct cache_fill *f[300], *x;
    struct cache_meta m = { 200, 0, 0, 0 };
    char key[32];
    int n = 0;

    for (n = 0; n < 256; n++) {
        snprintf(key, sizeof(key), "s%d", n);
        ck_assert_int_eq(cache_fill_begin(E.c, key, strlen(key), &m, NULL, 0, 10, &f[n]),
                         CACHE_OK);
    }
    ck_assert_int_eq(cache_fill_begin(E.c, "more", 4, &m, NULL, 0, 10, &x), CACHE_BUSY);
    for (int i = 0; i < n; i++)
        cache_fill_abort(f[i]);
    ck_assert_int_eq(cache_fill_begin(E.c, "more", 4, &m, NULL, 0, 10, &x), CACHE_OK);
    cache_fill_abort(x);
}
END_TEST

START_TEST(test_wrap_and_lapping)
{
    char key[32];
    size_t objsz = 200000;
    int n = 0, first_hit = -1, removed;
    struct cache_stats st;
    uint64_t ring = (uint64_t)E.c->g.nseg * E.c->g.seg_size;

    /* write 2.5 rings' worth */
    for (n = 0; (uint64_t)n * objsz < ring * 5 / 2; n++) {
        snprintf(key, sizeof(key), "w%d", n);
        ck_assert_int_eq(put_obj(E.c, key, objsz, (unsigned)n, 1), CACHE_OK);
    }
    ck_assert_uint_gt(E.c->shm->cur_seg, 2 * E.c->g.nseg);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "w%d", i);
        int rc = get_obj(E.c, key, objsz, (unsigned)i);
        if (rc == CACHE_OK && first_hit < 0)
            first_hit = i;
        if (first_hit >= 0)
            ck_assert_msg(rc == CACHE_OK, "w%d missing after first hit w%d", i, first_hit);
    }
    /* all of the last ring minus one segment survives, nothing older */
    ck_assert_int_gt(first_hit, 0);
    ck_assert_int_ge(n - first_hit, (int)((ring - E.c->g.seg_size) / objsz) - 1);
    ck_assert_int_le(n - first_hit, (int)(ring / objsz) + 1);
    /* the manager sweeps the lapped entries out of the index */
    removed = 0;
    for (int i = 0; i < 4; i++)
        removed += cache_manager_tick(E.c);
    ck_assert_int_ge(removed, first_hit - 1);
    cache_stats_sum(E.area, &st);
    ck_assert_uint_ge(st.c.evictions, (uint64_t)first_hit - 1);
    ck_assert_uint_le(st.store_bytes_used, st.store_bytes);
}
END_TEST

START_TEST(test_pin_prevents_overwrite)
{
    struct cache_obj o;
    uint8_t copy[50000];
    char key[32];
    uint64_t ring = (uint64_t)E.c->g.nseg * E.c->g.seg_size, first_seg;
    int n;

    ck_assert_int_eq(put_obj(E.c, "pinned", sizeof(copy), 42, 1), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "pinned", 6, &o), CACHE_OK);
    memcpy(copy, o.iov[1].iov_base, sizeof(copy));
    first_seg = E.c->shm->cur_seg;
    for (n = 0; (uint64_t)n * 100000 < ring * 2; n++) {
        snprintf(key, sizeof(key), "p%d", n);
        ck_assert_int_eq(put_obj(E.c, key, 100000, (unsigned)n, 1), CACHE_OK);
    }
    ck_assert_uint_gt(E.c->shm->cur_seg, first_seg + E.c->g.nseg);
    /* bytes under the pin untouched two laps later */
    ck_assert(memcmp(copy, o.iov[1].iov_base, sizeof(copy)) == 0);
    cache_obj_release(E.c, &o);
    /* but the object is gone for new readers */
    ck_assert_int_eq(cache_lookup(E.c, "pinned", 6, &o), CACHE_MISS);
    /* and the recent ones are fine */
    snprintf(key, sizeof(key), "p%d", n - 1);
    ck_assert_int_eq(get_obj(E.c, key, 100000, (unsigned)n - 1), CACHE_OK);
}
END_TEST

/* A worker dies holding a pin; the writer skips that segment until the
 * master resets the slot. */
START_TEST(test_dead_slot_pin_and_lock)
{
    char key[32], err[256];
    pid_t pid;
    int status, n;
    uint64_t ring = (uint64_t)E.c->g.nseg * E.c->g.seg_size;
    uint32_t seg;

    ck_assert_int_eq(put_obj(E.c, "victim", 30000, 5, 1), CACHE_OK);
    seg = cache_seg_of(E.c->shm, E.c->shm->head - 1);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct cache_obj o;
        struct cache *c = cache_open(&E.cf, E.area, 3, err, sizeof(err));
        if (c == NULL || cache_lookup(c, "victim", 6, &o) != CACHE_OK)
            _exit(1);
        /* die holding the pin and the ring lock */
        if (cache_ring_lock(c->shm) < 0)
            _exit(2);
        _exit(0);
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_int_eq(WEXITSTATUS(status), 0);
    ck_assert(cache_slot_pins(E.c->shm, 3)[seg / 64] & (1ull << (seg % 64)));
    /* lock recovered (EOWNERDEAD), pinned segment skipped */
    for (n = 0; (uint64_t)n * 100000 < ring * 3 / 2; n++) {
        snprintf(key, sizeof(key), "d%d", n);
        ck_assert_int_eq(put_obj(E.c, key, 100000, (unsigned)n, 1), CACHE_OK);
    }
    {
        /* the victim's bytes are intact even though it is lapped */
        struct cache_rec *r = (struct cache_rec *)(E.c->ring + (uint64_t)seg * E.c->g.seg_size);
        ck_assert_uint_eq(r->magic, CACHE_REC_MAGIC);
        ck_assert_uint_eq(r->body_len, 30000);
    }
    ck_assert_int_eq(get_obj(E.c, "victim", 30000, 5), CACHE_MISS);
    cache_slot_reset(E.area, 3);
    ck_assert_uint_eq(cache_slot_pins(E.c->shm, 3)[seg / 64], 0);
    for (n = 0; (uint64_t)n * 100000 < ring; n++) {
        snprintf(key, sizeof(key), "e%d", n);
        ck_assert_int_eq(put_obj(E.c, key, 100000, (unsigned)n, 1), CACHE_OK);
    }
    {
        struct cache_rec *r = (struct cache_rec *)(E.c->ring + (uint64_t)seg * E.c->g.seg_size);
        ck_assert(r->magic != CACHE_REC_MAGIC || r->body_len != 30000);
    }
}
END_TEST

#define NCHILD 4
#define PER_CHILD 120

static size_t
child_len(int ch, int i)
{
    return (size_t)((ch * 7919 + i * 104729) % 30000) + 1;
}

START_TEST(test_concurrent_fills)
{
    pid_t pids[NCHILD];
    char key[32];
    int hits = 0;

    /* big enough that nothing laps: every object must come back intact */
    teardown();
    env_setup_conf(32 * MiB, 0, 0);

    for (int ch = 0; ch < NCHILD; ch++) {
        pids[ch] = fork();
        ck_assert_int_ge(pids[ch], 0);
        if (pids[ch] == 0) {
            char err[256];
            struct cache *c = cache_open(&E.cf, E.area, ch + 1, err, sizeof(err));
            static uint8_t buf[40000];
            struct cache_meta m = { 200, 0, 1000, 2000 };
            if (c == NULL)
                _exit(10);
            /* two fills interleaved per process, half of unknown length */
            for (int i = 0; i < PER_CHILD; i += 2) {
                struct cache_fill *f[2];
                size_t len[2], done[2] = { 0, 0 };
                for (int j = 0; j < 2; j++) {
                    char hdr[64];
                    unsigned seed = (unsigned)(ch * 1000 + i + j);
                    int n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", seed);
                    snprintf(key, sizeof(key), "c%d-%d", ch, i + j);
                    len[j] = child_len(ch, i + j);
                    if (cache_fill_begin(c, key, strlen(key), &m, hdr, (size_t)n,
                                         (i / 2) % 2 ? (int64_t)len[j] : -1, &f[j]) != CACHE_OK)
                        _exit(11);
                }
                while (done[0] < len[0] || done[1] < len[1]) {
                    for (int j = 0; j < 2; j++) {
                        size_t k = len[j] - done[j] > 1500 ? 1500 : len[j] - done[j];
                        unsigned seed = (unsigned)(ch * 1000 + i + j);
                        for (size_t b = 0; b < k; b++)
                            buf[b] = pat(seed, done[j] + b);
                        if (k && cache_fill_write(f[j], buf, k) != CACHE_OK)
                            _exit(12);
                        done[j] += k;
                    }
                }
                for (int j = 0; j < 2; j++)
                    if (cache_fill_commit(f[j], NULL) != CACHE_OK)
                        _exit(13);
            }
            cache_close(c);
            _exit(0);
        }
    }
    for (int ch = 0; ch < NCHILD; ch++) {
        int status;
        ck_assert_int_eq(waitpid(pids[ch], &status, 0), pids[ch]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d: %d", ch,
                      status);
    }
    for (int ch = 0; ch < NCHILD; ch++)
        for (int i = 0; i < PER_CHILD; i++) {
            snprintf(key, sizeof(key), "c%d-%d", ch, i);
            if (get_obj(E.c, key, child_len(ch, i), (unsigned)(ch * 1000 + i)) == CACHE_OK)
                hits++;
        }
    /* 480 objects of ~15 KiB on average fit in the ring: all must be there */
    ck_assert_int_eq(hits, NCHILD * PER_CHILD);
    {
        struct cache_stats st;
        cache_stats_sum(E.area, &st);
        ck_assert_uint_eq(st.c.fills, NCHILD * PER_CHILD);
    }
}
END_TEST

START_TEST(test_corrupt_magic_and_record)
{
    off_t a, b;
    uint32_t bad = 0xdeadbeef;

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 2, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "c", 1000, 3, 1), CACHE_OK);
    a = rec_file_off(E.c, "a");
    b = rec_file_off(E.c, "b");
    env_restart(1);
    content_pwrite(&bad, 4, a);                                    /* magic */
    content_pwrite(&bad, 4, b + offsetof(struct cache_rec, hdr_len)); /* header field */
    env_restart(1);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 1), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "b", 1000, 2), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "c", 1000, 3), CACHE_OK);
    /* damaged entries are dropped at once */
    ck_assert_int_eq(cache_remove(E.c, "a", 1), CACHE_MISS);
    {
        struct cache_stats st;
        cache_stats_sum(E.area, &st);
        ck_assert_uint_eq(st.c.corrupt, 2);
    }
}
END_TEST

START_TEST(test_corrupt_wrong_key_and_lengths)
{
    uint8_t ha[16], hb[16], hc[16];
    size_t mapsize = E.c->g.mapsize;

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 2, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "c", 1000, 3, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "d", 1000, 4, 1), CACHE_OK);
    cache_key_hash(E.c, "a", 1, ha);
    cache_key_hash(E.c, "b", 1, hb);
    cache_key_hash(E.c, "c", 1, hc);
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    raw_edit(ha, edit_copy_from, hb, mapsize);  /* a's entry now points at b's record */
    raw_edit(hb, edit_body_len, NULL, mapsize);
    raw_edit(hc, edit_rec_len, NULL, mapsize);
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 2), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "b", 1000, 2), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "c", 1000, 3), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "d", 1000, 4), CACHE_OK);
}
END_TEST

START_TEST(test_corrupt_body_checksum)
{
    off_t a;
    uint8_t x = 0x55;

    /* verify (debug) mode: every hit checks the body */
    E.c->conf.verify = 1;
    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 2, 1), CACHE_OK);
    a = rec_file_off(E.c, "a");
    E.c->map[a + CACHE_REC_SIZE + 1 + 12 + 500] ^= x;     /* key "a", 12-byte header */
    ck_assert_int_eq(cache_lookup(E.c, "a", 1, &(struct cache_obj){ 0 }), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "b", 1000, 2), CACHE_OK);
}
END_TEST

START_TEST(test_unclean_shutdown)
{
    off_t b;
    uint8_t x = 0x55;
    struct cache_ent e;
    uint8_t ha[16];

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 2, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "c", 1000, 3, 1), CACHE_OK);
    b = rec_file_off(E.c, "b");
    /* crash: no clean-shutdown mark; a body byte lost */
    cache_close(E.c);
    E.c = NULL;
    content_pwrite(&x, 1, b + CACHE_REC_SIZE + 1 + 12 + 10);
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_uint_gt(E.c->shm->trust_epoch, 0);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "b", 1000, 2), CACHE_MISS);
    /* the manager's sweep re-stamps verified entries */
    cache_manager_tick(E.c);
    cache_key_hash(E.c, "c", 1, ha);
    ck_assert_int_eq(cache_index_get(E.c, ha, &e), CACHE_OK);
    ck_assert_uint_eq(e.epoch, E.c->epoch);
    ck_assert_int_eq(get_obj(E.c, "c", 1000, 3), CACHE_OK);
    /* and a clean restart after that keeps everything */
    env_restart(1);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "c", 1000, 3), CACHE_OK);
}
END_TEST

START_TEST(test_restart_persistence)
{
    uint64_t head, cur;
    char key[32];
    struct cache_obj o;

    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        ck_assert_int_eq(put_obj(E.c, key, 50000, (unsigned)i, i & 1), CACHE_OK);
    }
    head = E.c->shm->head;
    cur = E.c->shm->cur_seg;
    ck_assert_uint_gt(cur, 0);
    env_restart(1);
    ck_assert_uint_eq(E.c->shm->cur_seg, cur);
    ck_assert_uint_ge(E.c->shm->head, head);
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        ck_assert_int_eq(get_obj(E.c, key, 50000, (unsigned)i), CACHE_OK);
    }
    /* new writes land after the old head: the old objects survive */
    ck_assert_int_eq(put_obj(E.c, "after", 50000, 99, 1), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "after", 5, &o), CACHE_OK);
    cache_obj_release(E.c, &o);
    ck_assert_uint_ge(E.c->shm->head, head + 50000);
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        ck_assert_int_eq(get_obj(E.c, key, 50000, (unsigned)i), CACHE_OK);
    }
    /* a crash restart (no mark) keeps them too: only verification differs */
    cache_close(E.c);
    E.c = NULL;
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(get_obj(E.c, "after", 50000, 99), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "r0", 50000, 0), CACHE_OK);
}
END_TEST

/* Objects larger than a segment (issue 21): extents in several segments
 * and a CHAIN record; pins on every extent; refresh; abort; restart;
 * a version 1 store header upgraded in place. */
START_TEST(test_large_objects)
{
    struct cache_obj o;
    struct cache_meta m = { 203, 0, 1000, 3000 };
    struct cache_fill *f;
    uint64_t ring = (uint64_t)E.c->g.nseg * E.c->g.seg_size;
    const void *p;
    char key[32];
    int n;

    /* 16M store: 14 segments of 1 MiB; a quarter is 3.5 MiB */
    ck_assert_int_eq(put_obj(E.c, "L1", 3 * MiB, 11, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "L2", 3 * MiB + 12345, 12, 0), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "L1", 3 * MiB, 11), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "L2", 3 * MiB + 12345, 12), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "L1", 2, &o), CACHE_OK);
    ck_assert_ptr_nonnull(o.co_chain);
    ck_assert_uint_lt(o.iov[1].iov_len, o.body_len);
    ck_assert_uint_eq(cache_obj_span(E.c, &o, 3 * MiB, &p), 0);
    ck_assert_uint_eq(cache_obj_span(E.c, &o, 3 * MiB - 1, &p), 1);
    ck_assert_uint_eq(*(const uint8_t *)p, pat(11, 3 * MiB - 1));

    /* a refresh writes a new CHAIN record over the same extents */
    ck_assert_int_eq(cache_obj_update_headers(E.c, &o, "L1", 2, &m, "X-Seed: 11\r\n", 12),
                     CACHE_OK);
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(cache_lookup(E.c, "L1", 2, &o), CACHE_OK);
    ck_assert_int_eq(o.meta.status, 203);
    ck_assert_int_eq(o.meta.expires, 3000);
    cache_obj_release(E.c, &o);

    /* an aborted or short large fill is never visible */
    ck_assert_int_eq(cache_fill_begin(E.c, "L3", 2, &m, NULL, 0, 3 * MiB, &f), CACHE_OK);
    for (int i = 0; i < 200; i++)
        ck_assert_int_eq(cache_fill_write(f, "0123456789abcdef", 16) == CACHE_OK ? 0 : 1, 0);
    {
        static uint8_t big[2 * MiB];
        ck_assert_int_eq(cache_fill_write(f, big, sizeof(big)), CACHE_OK);
    }
    ck_assert_int_eq(cache_fill_commit(f, NULL), CACHE_ABORTED);
    ck_assert_int_eq(cache_lookup(E.c, "L3", 2, &o), CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "L4", 2 * MiB, 4, 0), CACHE_OK);
    ck_assert_int_eq(cache_fill_begin(E.c, "L5", 2, &m, NULL, 0, -1, &f), CACHE_OK);
    {
        static uint8_t big[2 * MiB];
        ck_assert_int_eq(cache_fill_write(f, big, sizeof(big)), CACHE_OK);
    }
    cache_fill_abort(f);
    ck_assert_int_eq(cache_lookup(E.c, "L5", 2, &o), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "L4", 2 * MiB, 4), CACHE_OK);

    /* survives a restart (clean and not) */
    env_restart(1);
    ck_assert_int_eq(get_obj(E.c, "L2", 3 * MiB + 12345, 12), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "L4", 2 * MiB, 4), CACHE_OK);
    env_restart(0);
    ck_assert_int_eq(get_obj(E.c, "L2", 3 * MiB + 12345, 12), CACHE_OK);

    /* a damaged extent (not the first) makes the object a miss */
    ck_assert_int_eq(cache_lookup(E.c, "L2", 2, &o), CACHE_OK);
    {
        const struct cache_rec *h = o.co_chain;
        struct cache_ext x;
        uint8_t *r;

        ck_assert_uint_ge(h->pad, 3);
        cache_chain_ext(h, 2, &x);
        r = cache_ring_ptr(E.c, x.off);
        cache_obj_release(E.c, &o);
        r[CACHE_REC_SIZE - 1] ^= 1;     /* in head_sum */
        ck_assert_int_eq(cache_lookup(E.c, "L2", 2, &o), CACHE_MISS);
    }

    /* every extent of a held object is pinned: two laps later, its bytes
     * are intact; released, it is gone */
    ck_assert_int_eq(put_obj(E.c, "L6", 3 * MiB, 6, 1), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "L6", 2, &o), CACHE_OK);
    for (n = 0; (uint64_t)n * 300000 < ring * 2; n++) {
        snprintf(key, sizeof(key), "q%d", n);
        ck_assert_int_eq(put_obj(E.c, key, 300000, (unsigned)n, n & 1), CACHE_OK);
    }
    for (uint64_t i = 0; i < 3 * MiB;) {
        size_t k = cache_obj_span(E.c, &o, i, &p);

        ck_assert_uint_gt(k, 0);
        for (size_t j = 0; j < k; j += 4099)
            ck_assert_uint_eq(((const uint8_t *)p)[j], pat(6, i + j));
        i += k;
    }
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(cache_lookup(E.c, "L6", 2, &o), CACHE_MISS);
    for (uint32_t s = 0; s < E.c->g.nseg; s++)
        ck_assert_uint_eq(E.c->pincount[s], 0);

    /* over the limit: refused */
    ck_assert_int_eq(put_obj(E.c, "L7", 4 * MiB, 7, 1), CACHE_TOOBIG);

    /* cache_fill_max_extents bounds the extents a fill of a known length
     * takes, within one (read-while-writer publishes a fill only when
     * they fit in a fill table slot) */
    for (uint64_t len = 1000; len <= 3 * MiB + MiB / 2; len += MiB / 7) {
        static uint8_t buf[64 * 1024];
        uint64_t hoff, off[8], pos[8];
        uint32_t hl, nx;

        ck_assert_int_eq(cache_fill_begin(E.c, "X", 1, &m, "X-A: b\r\n", 8, (int64_t)len, &f),
                         CACHE_OK);
        for (uint64_t w = 0; w < len; w += sizeof(buf))
            ck_assert_int_eq(cache_fill_write(f, buf, len - w < sizeof(buf) ? (size_t)(len - w)
                                                                            : sizeof(buf)),
                             CACHE_OK);
        nx = cache_fill_where(f, &hoff, &hl, off, pos, 8);
        ck_assert_uint_le(nx, cache_fill_max_extents(E.c, len));
        ck_assert_uint_ge(nx + 1, cache_fill_max_extents(E.c, len));
        cache_fill_abort(f);
    }
}
END_TEST

/* A store written with layout version 1 (the release before objects
 * spanned segments) is read as it is, and its header says 2 afterwards. */
START_TEST(test_layout_v1_upgraded)
{
    struct cache_store_hdr h;
    char path[128];
    int fd;

    ck_assert_int_eq(put_obj(E.c, "old", 100000, 3, 1), CACHE_OK);
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    snprintf(path, sizeof(path), "%s/content", E.dir);
    fd = open(path, O_RDWR);
    ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    ck_assert_uint_eq(h.version, CACHE_STORE_VERSION);
    h.version = 1;
    h.hsum = cache_store_hdr_sum(&h);
    ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(get_obj(E.c, "old", 100000, 3), CACHE_OK);
    ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    ck_assert_uint_eq(h.version, CACHE_STORE_VERSION);
    close(fd);
}
END_TEST

START_TEST(test_layout_version_reinit)
{
    struct cache_store_hdr h;
    char path[128];
    int fd;

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    snprintf(path, sizeof(path), "%s/content", E.dir);
    fd = open(path, O_RDWR);
    ck_assert_int_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    h.version = 99;
    h.hsum = cache_store_hdr_sum(&h);
    ck_assert_int_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
    close(fd);
    /* cache_open refuses an unprepared store */
    {
        char err[256];
        ck_assert_ptr_null(cache_open(&E.cf, E.area, 0, err, sizeof(err)));
        ck_assert_ptr_nonnull(strstr(err, "layout version"));
    }
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 1), CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "a", 1000, 5, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 5), CACHE_OK);

    /* another geometry (storage size changed) re-initialises too */
    cache_close(E.c);
    E.c = NULL;
    munmap(E.area, E.arealen);
    E.cf.size = 32 * MiB;
    env_shm();
    env_open();
    ck_assert_uint_eq(E.c->g.seg_size, 2 * MiB);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 5), CACHE_MISS);
}
END_TEST

START_TEST(test_wrong_size_content)
{
    char path[128], key[32];
    struct stat st;
    uint64_t fsz = E.c->g.file_size;
    int hits = 0, n;

    for (n = 0; n < 100; n++) {
        snprintf(key, sizeof(key), "t%d", n);
        ck_assert_int_eq(put_obj(E.c, key, 100000, (unsigned)n, 1), CACHE_OK);
    }
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    snprintf(path, sizeof(path), "%s/content", E.dir);
    /* too long: cut back, nothing lost */
    ck_assert_int_eq(truncate(path, (off_t)fsz + 12345), 0);
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, fsz);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "t%d", i);
        ck_assert_int_eq(get_obj(E.c, key, 100000, (unsigned)i), CACHE_OK);
    }
    /* truncated: re-extended, the lost records dropped, the rest served */
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    ck_assert_int_eq(truncate(path, (off_t)(fsz / 2)), 0);
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_uint_eq((uint64_t)st.st_size, fsz);
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "t%d", i);
        if (get_obj(E.c, key, 100000, (unsigned)i) == CACHE_OK)
            hits++;
    }
    ck_assert_int_gt(hits, 10);
    ck_assert_int_lt(hits, n);
    ck_assert_int_eq(put_obj(E.c, "new", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "new", 1000, 1), CACHE_OK);
}
END_TEST

/* ---- purge tables (purge.c, issue 23) ---- */

static int
put_tagged(struct cache *c, const char *key, const char *tags, unsigned seed)
{
    struct cache_meta m = { 200, 0, 1000, (int64_t)time(NULL) + 600 };
    struct cache_fill *f;
    char hdr[512], body[64];
    int n = snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 OK\r\n%sX-Seed: %u\r\n", tags, seed);
    int rc = cache_fill_begin(c, key, strlen(key), &m, hdr, (size_t)n, 64, &f);

    if (rc != CACHE_OK)
        return rc;
    fill_pat((uint8_t *)body, sizeof(body), seed);
    if ((rc = cache_fill_write(f, body, sizeof(body))) != CACHE_OK) {
        cache_fill_abort(f);
        return rc;
    }
    return cache_fill_commit(f, NULL);
}

static int64_t
purge1(struct cache *c, int kind, const char *arg, int soft)
{
    size_t len = arg ? strlen(arg) : 0;
    struct cache_purge_req pr = { .kind = kind, .nargs = 1, .arg = &arg, .len = &len,
                                  .soft = soft, .now = (int64_t)time(NULL) };
    return cache_purge(c, &pr);
}

static int
is_hit(struct cache *c, const char *key)
{
    struct cache_obj o;
    int rc = cache_lookup(c, key, strlen(key), &o);

    if (rc == CACHE_OK)
        cache_obj_release(c, &o);
    return rc == CACHE_OK;
}

START_TEST(test_purge_tags_parse)
{
    static const char blk[] = "HTTP/1.1 200 OK\r\nSurrogate-Key:  a  b\tc \r\n"
                              "Content-Type: x\r\ncache-tag: x y, z,,w ,a\r\nSurrogate-Key: d\r\n";
    static const char *const want[] = { "a", "b", "c", "x y", "z", "w", "d" };
    const char *tag[16];
    uint8_t len[16];
    int n = cache_pix_tags(blk, sizeof(blk) - 1, tag, len, 16);

    ck_assert_int_eq(n, 7);
    for (int i = 0; i < n; i++)
        ck_assert_msg(strlen(want[i]) == len[i] && memcmp(tag[i], want[i], len[i]) == 0,
                      "tag %d: %.*s", i, (int)len[i], tag[i]);
    /* a status line alone, and a field named like one but longer */
    ck_assert_int_eq(cache_pix_tags("HTTP/1.1 200 OK\r\n", 17, tag, len, 16), 0);
    ck_assert_int_eq(cache_pix_tags("H\r\nSurrogate-Keys: a\r\n", 22, tag, len, 16), 0);
}
END_TEST

START_TEST(test_purge_exact)
{
    char key[64], tags[128];
    int hits = 0;

    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "http://h%d.test/p/%d", i % 2, i);
        snprintf(tags, sizeof(tags), "Surrogate-Key: k%d all\r\nCache-Tag: c%d\r\n", i % 3, i % 2);
        ck_assert_int_eq(put_tagged(E.c, key, tags, (unsigned)i), CACHE_OK);
    }
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "k1", 0), 100);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "k1", 0), 0);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_PREFIX, "http://h0.test/", 0), 100);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "http://h%d.test/p/%d", i % 2, i);
        ck_assert_int_eq(is_hit(E.c, key), i % 3 != 1 && i % 2 == 1);
    }
    /* soft: still a hit, but stale, until a new fill */
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "c1", 1), 100);
    {
        struct cache_obj o;
        ck_assert_int_eq(cache_lookup(E.c, "http://h1.test/p/5", 18, &o), CACHE_OK);
        ck_assert_int_lt(o.meta.expires, (int64_t)time(NULL));
        cache_obj_release(E.c, &o);
    }
    /* a replaced object's old tags are gone with it */
    ck_assert_int_eq(put_tagged(E.c, "http://h1.test/p/5", "Cache-Tag: new\r\n", 5), CACHE_OK);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "k2", 0), 49);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "new", 0), 1);
    /* prefixes longer than what the key table keeps: the record's key decides */
    char longk[700], pre[600];
    memset(longk, 'a', sizeof(longk));
    memcpy(longk, "http://l/", 9);
    longk[650] = '\0';
    ck_assert_int_eq(put_tagged(E.c, longk, "", 1), CACHE_OK);
    memcpy(pre, longk, 520);
    pre[520] = '\0';
    pre[519] = 'b';
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_PREFIX, pre, 0), 0);
    pre[519] = 'a';
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_PREFIX, pre, 0), 1);
    ck_assert_int_eq(is_hit(E.c, longk), 0);
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "http://h%d.test/p/%d", i % 2, i);
        hits += is_hit(E.c, key);
    }
    ck_assert_int_eq(hits, 50);      /* odd, not k1, not k2 */
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_ALL, NULL, 0), 50);
    ck_assert_int_eq(cache_objects(E.c), 0);
}
END_TEST

/* A store from before the tables: they are built by one walk at prepare. */
START_TEST(test_purge_tables_upgrade)
{
    char key[64], tags[64];
    MDB_txn *txn;
    MDB_val k = { 3, (void *)"pix" };

    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "http://u.test/%d", i);
        snprintf(tags, sizeof(tags), "Surrogate-Key: u%d\r\n", i % 4);
        ck_assert_int_eq(put_tagged(E.c, key, tags, (unsigned)i), CACHE_OK);
    }
    ck_assert_int_eq(mdb_txn_begin(E.c->env, NULL, 0, &txn), 0);
    ck_assert_int_eq(mdb_drop(txn, E.c->dbi_tag, 0), 0);
    ck_assert_int_eq(mdb_drop(txn, E.c->dbi_key, 0), 0);
    ck_assert_int_eq(mdb_drop(txn, E.c->dbi_rev, 0), 0);
    ck_assert_int_eq(mdb_del(txn, E.c->dbi_meta, &k, NULL), 0);
    ck_assert_int_eq(mdb_txn_commit(txn), 0);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "u1", 0), 0);     /* empty now */
    env_restart(1);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_TAG, "u1", 0), 25);
    ck_assert_int_eq(purge1(E.c, CACHE_PURGE_PREFIX, "http://u.test/", 0), 75);
}
END_TEST

START_TEST(test_map_full)
{
    char key[32];
    int ok = 0, full = 0, rc;

    /* a 256 KiB index (64 pages) holds a couple of thousand entries */
    teardown();
    env_setup_conf(16 * MiB, 256 * 1024, 0);
    for (int i = 0; i < 3000; i++) {
        snprintf(key, sizeof(key), "m%d", i);
        rc = put_obj(E.c, key, 100, (unsigned)i, 1);
        ck_assert_msg(rc == CACHE_OK || rc == CACHE_FULL, "%d: %s", i, cache_strerror(rc));
        if (rc == CACHE_OK)
            ok++;
        else
            full++;
        if (i % 500 == 0)
            ck_assert_int_ne(cache_manager_tick(E.c), CACHE_ERROR);
    }
    ck_assert_int_gt(ok, 2000);
    {
        struct cache_stats st;
        cache_stats_sum(E.area, &st);
        ck_assert_uint_gt(st.c.evictions, 0);     /* the backstop ran */
    }
    ck_assert_int_eq(get_obj(E.c, "m2999", 100, 2999), rc == CACHE_OK ? CACHE_OK : CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "last", 100, 1, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "last", 100, 1), CACHE_OK);
    env_restart(1);
    ck_assert_int_eq(get_obj(E.c, "last", 100, 1), CACHE_OK);

    /* Without the writers' high-water check, MDB_MAP_FULL itself is hit:
     * every put is OK or CACHE_FULL, never an error or a crash. */
    for (int i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "n%d", i);
        E.c->puts = 1;
        rc = put_obj(E.c, key, 100, (unsigned)i, 1);
        ck_assert_msg(rc == CACHE_OK || rc == CACHE_FULL, "%d: %s", i, cache_strerror(rc));
    }
    ck_assert_int_eq(get_obj(E.c, "last", 100, 1) == CACHE_OK
                     || get_obj(E.c, "last", 100, 1) == CACHE_MISS, 1);
}
END_TEST

START_TEST(test_damaged_index_rebuilt)
{
    char path[128];

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(cache_mark_clean_shutdown(E.c), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    snprintf(path, sizeof(path), "%s/index/data.mdb", E.dir);
    {
        int fd = open(path, O_RDWR | O_TRUNC);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "garbage garbage garbage", 23), 23);
        close(fd);
    }
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 1), CACHE_MISS);
    ck_assert_int_eq(put_obj(E.c, "a", 1000, 2, 1), CACHE_OK);
    ck_assert_int_eq(get_obj(E.c, "a", 1000, 2), CACHE_OK);
}
END_TEST

START_TEST(test_shm_validation)
{
    char err[256];
    uint8_t junk[4096];

    memset(junk, 0, sizeof(junk));
    ck_assert_ptr_null(cache_open(&E.cf, junk, 0, err, sizeof(err)));
    ck_assert_ptr_null(cache_open(&E.cf, E.area, NSLOTS, err, sizeof(err)));
    ck_assert_int_eq(cache_shm_init(E.area, 10, &E.cf, NSLOTS), CACHE_INVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Header refresh (cache_update_headers) */

static const struct cache_meta upd_meta = { 203, 0x11, 3000, 4000 };

/* Look key up, expect header block hdr, meta m, and body pat(seed) of len
 * bytes; return the body pointer (object released). */
static const uint8_t *
get_upd(struct cache *c, const char *key, const char *hdr, const struct cache_meta *m,
        size_t len, unsigned seed)
{
    struct cache_obj o;
    const uint8_t *body;

    ck_assert_int_eq(cache_lookup(c, key, strlen(key), &o), CACHE_OK);
    ck_assert_uint_eq(o.iov[0].iov_len, strlen(hdr));
    ck_assert_uint_eq(o.hdr_len, strlen(hdr));
    ck_assert(memcmp(o.iov[0].iov_base, hdr, strlen(hdr)) == 0);
    ck_assert_uint_eq(o.iov[1].iov_len, len);
    ck_assert_uint_eq(o.body_len, len);
    for (size_t i = 0; i < len; i++)
        if (((uint8_t *)o.iov[1].iov_base)[i] != pat(seed, i))
            ck_abort_msg("%s: body byte %zu differs", key, i);
    ck_assert_int_eq(o.meta.status, m->status);
    ck_assert_int_eq(o.meta.flags, m->flags);
    ck_assert_int_eq(o.meta.stored, m->stored);
    ck_assert_int_eq(o.meta.expires, m->expires);
    body = o.iov[1].iov_base;
    cache_obj_release(c, &o);
    return body;
}

static int
upd(struct cache *c, const char *key, const char *hdr)
{
    return cache_update_headers(c, key, strlen(key), &upd_meta, hdr, strlen(hdr));
}

static uint64_t
obj_entries(struct cache *c)
{
    MDB_stat st;

    ck_assert_int_eq(mdb_txn_renew(c->rtxn), 0);
    ck_assert_int_eq(mdb_stat(c->rtxn, c->dbi_obj, &st), 0);
    mdb_txn_reset(c->rtxn);
    return st.ms_entries;
}

START_TEST(test_update_headers)
{
    struct cache_obj old, o;
    const uint8_t *body, *b2;
    char big[600];
    uint8_t *oldhdr;
    struct cache_meta m = { 200, 0, 1000, 2000 };

    ck_assert_int_eq(put_obj(E.c, "u", 50000, 3, 1), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &old), CACHE_OK);   /* the worker holds it */
    oldhdr = old.iov[0].iov_base;
    body = old.iov[1].iov_base;
    ck_assert_int_eq(upd(E.c, "u", "X-New: 1\r\n"), CACHE_OK);
    /* the held object is untouched: same bytes, still pinned */
    ck_assert(memcmp(old.iov[0].iov_base, "X-Seed: 3\r\n", 11) == 0);
    ck_assert_int_eq(old.meta.status, 200);
    b2 = get_upd(E.c, "u", "X-New: 1\r\n", &upd_meta, 50000, 3);
    ck_assert_ptr_eq(b2, body);                    /* the body was not rewritten */
    cache_obj_release(E.c, &old);

    /* both records pinned while held, both released after */
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &o), CACHE_OK);
    ck_assert_int_eq(o.co_pinned, 2);
    ck_assert_ptr_ne(o.iov[0].iov_base, oldhdr);
    ck_assert_uint_gt(E.c->pincount[o.co_seg], 0);
    ck_assert_uint_gt(E.c->pincount[o.co_body_seg], 0);
    cache_obj_release(E.c, &o);
    for (uint32_t i = 0; i < E.c->g.nseg; i++)
        ck_assert_uint_eq(E.c->pincount[i], 0);
    ck_assert_uint_eq(E.c->mypins[0], 0);

    /* header blocks longer and shorter (empty) than the body record's own */
    memset(big, 'h', sizeof(big));
    big[sizeof(big) - 1] = 0;
    ck_assert_int_eq(upd(E.c, "u", big), CACHE_OK);
    ck_assert_ptr_eq(get_upd(E.c, "u", big, &upd_meta, 50000, 3), body);
    ck_assert_int_eq(upd(E.c, "u", ""), CACHE_OK);
    ck_assert_ptr_eq(get_upd(E.c, "u", "", &upd_meta, 50000, 3), body);
    /* the old header blocks are never served again */
    ck_assert_int_eq(upd(E.c, "u", "X-Last: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &o), CACHE_OK);
    ck_assert_uint_eq(o.iov[0].iov_len, 11);
    ck_assert(memcmp(o.iov[0].iov_base, "X-Last: 1\r\n", 11) == 0);
    ck_assert_ptr_ne(o.iov[0].iov_base, oldhdr);
    cache_obj_release(E.c, &o);

    /* missing key, bad arguments, too big */
    ck_assert_int_eq(upd(E.c, "nope", "X: 1\r\n"), CACHE_MISS);
    ck_assert_int_eq(cache_lookup(E.c, "nope", 4, &o), CACHE_MISS);
    ck_assert_int_eq(cache_update_headers(E.c, "u", 1, NULL, "", 0), CACHE_INVAL);
    ck_assert_int_eq(cache_update_headers(E.c, "u", 1, &upd_meta, NULL, 5), CACHE_INVAL);
    ck_assert_int_eq(cache_update_headers(E.c, "u", 1, &upd_meta, big,
                                          E.c->g.seg_size), CACHE_TOOBIG);

    /* a fill replaced the object after the lookup: the held refresh misses,
     * the plain one applies to the new body */
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &old), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "u", 700, 4, 1), CACHE_OK);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &old, "u", 1, &upd_meta, "A\r\n", 3),
                     CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "u", 700, 4), CACHE_OK);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &old, "v", 1, &upd_meta, "A\r\n", 3),
                     CACHE_INVAL);
    cache_obj_release(E.c, &old);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &old, "u", 1, &upd_meta, "A\r\n", 3),
                     CACHE_INVAL);                 /* released */
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &old), CACHE_OK);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &old, "u", 1, &upd_meta, "B\r\n", 3),
                     CACHE_OK);
    cache_obj_release(E.c, &old);
    get_upd(E.c, "u", "B\r\n", &upd_meta, 700, 4);
    /* and a refresh of a refreshed object, held */
    ck_assert_int_eq(cache_lookup(E.c, "u", 1, &old), CACHE_OK);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &old, "u", 1, &m, "C\r\n", 3), CACHE_OK);
    cache_obj_release(E.c, &old);
    get_upd(E.c, "u", "C\r\n", &m, 700, 4);
    ck_assert_uint_eq(obj_entries(E.c), 1);
}
END_TEST

START_TEST(test_update_repeated)
{
    const uint8_t *body;
    char hdr[64];
    struct cache_ent e;
    uint8_t h[16];
    uint64_t off0, prev = 0;

    ck_assert_int_eq(put_obj(E.c, "other", 1000, 9, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "r", 20000, 5, 0), CACHE_OK);
    cache_key_hash(E.c, "r", 1, h);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
    off0 = e.off;
    body = get_upd(E.c, "r", "X-Seed: 5\r\n", &(struct cache_meta){ 200, 0, 1000, 2000 },
                   20000, 5);
    for (int i = 0; i < 10; i++) {
        snprintf(hdr, sizeof(hdr), "X-Refresh: %d\r\n", i);
        ck_assert_int_eq(upd(E.c, "r", hdr), CACHE_OK);
        ck_assert_ptr_eq(get_upd(E.c, "r", hdr, &upd_meta, 20000, 5), body);
        ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
        ck_assert_uint_eq(e.body_off, off0);
        ck_assert_uint_gt(e.off, prev > off0 ? prev : off0);
        prev = e.off;
    }
    ck_assert_uint_eq(obj_entries(E.c), 2);
    ck_assert_int_eq(get_obj(E.c, "other", 1000, 9), CACHE_OK);
    {
        struct cache_stats st;
        cache_stats_sum(E.area, &st);
        ck_assert_uint_eq(st.c.fills, 2);
        ck_assert_uint_eq(st.c.corrupt, 0);
    }
}
END_TEST

START_TEST(test_update_remove)
{
    struct cache_obj o;

    ck_assert_int_eq(put_obj(E.c, "p", 3000, 1, 1), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "p", "X: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "p", 1, &o), CACHE_OK);      /* held across PURGE */
    ck_assert_int_eq(cache_remove(E.c, "p", 1), CACHE_OK);
    ck_assert_int_eq(cache_remove(E.c, "p", 1), CACHE_MISS);
    ck_assert_int_eq(get_obj(E.c, "p", 3000, 1), CACHE_MISS);
    /* a refresh never resurrects a removed object */
    ck_assert_int_eq(upd(E.c, "p", "X: 2\r\n"), CACHE_MISS);
    ck_assert_int_eq(cache_obj_update_headers(E.c, &o, "p", 1, &upd_meta, "X\r\n", 3),
                     CACHE_MISS);
    ck_assert(memcmp(o.iov[0].iov_base, "X: 1\r\n", 6) == 0);
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(cache_lookup(E.c, "p", 1, &o), CACHE_MISS);
    ck_assert_uint_eq(obj_entries(E.c), 0);

    /* The refresh's index put is a compare-and-swap on the body record,
     * inside the write txn: what closes the window between its read of
     * the entry and its put against a PURGE or a fill (too narrow for a
     * race test to hit reliably). */
    {
        struct cache_ent e, e2;
        uint8_t h[16];

        ck_assert_int_eq(put_obj(E.c, "p", 3000, 2, 1), CACHE_OK);
        cache_key_hash(E.c, "p", 1, h);
        ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
        e2 = e;
        e2.expires = 4242;
        ck_assert_int_eq(cache_index_put_if(E.c, h, &e2, e.body_off + 64), CACHE_MISS);
        ck_assert_int_eq(cache_index_put_if(E.c, h, &e2, e.body_off), CACHE_OK);
        ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
        ck_assert_int_eq(e.expires, 4242);
        ck_assert_int_eq(cache_remove(E.c, "p", 1), CACHE_OK);
        ck_assert_int_eq(cache_index_put_if(E.c, h, &e2, e.body_off), CACHE_MISS);
        ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_MISS);
    }
}
END_TEST

/* Fill until the ring has written `bytes` more, in objects of 100000. */
static void
churn(const char *prefix, uint64_t bytes)
{
    char key[32];

    for (int n = 0; (uint64_t)n * 100000 < bytes; n++) {
        snprintf(key, sizeof(key), "%s%d", prefix, n);
        ck_assert_int_eq(put_obj(E.c, key, 100000, (unsigned)n, 1), CACHE_OK);
    }
}

START_TEST(test_update_lapping)
{
    uint64_t seg = E.c->g.seg_size, ring = (uint64_t)E.c->g.nseg * seg;
    struct cache_ent e;
    struct cache_obj held;
    uint8_t h[16], copy[11];

    /* Body lapped while its header record is alive: a miss, and the sweep
     * drops the entry although its header record is alive. */
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 1, 1), CACHE_OK);
    churn("f", ring - 2 * seg);
    ck_assert_int_eq(upd(E.c, "b", "X-B: 1\r\n"), CACHE_OK);
    get_upd(E.c, "b", "X-B: 1\r\n", &upd_meta, 1000, 1);
    ck_assert_int_eq(cache_lookup(E.c, "b", 1, &held), CACHE_OK);
    memcpy(copy, held.iov[0].iov_base, 8);
    churn("g", 3 * seg);
    cache_key_hash(E.c, "b", 1, h);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
    ck_assert(cache_ring_alive(E.c->shm, e.off));
    ck_assert(!cache_ring_alive(E.c->shm, e.body_off));
    ck_assert_int_eq(cache_lookup(E.c, "b", 1, &(struct cache_obj){ 0 }), CACHE_MISS);
    ck_assert_int_eq(upd(E.c, "b", "X-B: 2\r\n"), CACHE_MISS);
    /* the held object's bytes (both segments pinned) were left alone */
    ck_assert(memcmp(held.iov[0].iov_base, copy, 8) == 0);
    for (size_t i = 0; i < 1000; i++)
        ck_assert_uint_eq(((uint8_t *)held.iov[1].iov_base)[i], pat(1, i));
    cache_obj_release(E.c, &held);
    for (int i = 0; i < 8 && cache_index_get(E.c, h, &e) == CACHE_OK; i++)
        cache_manager_tick(E.c);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_MISS);

    /* Header record lapped (and with it the older body): a miss too. */
    ck_assert_int_eq(put_obj(E.c, "c", 1000, 2, 1), CACHE_OK);
    churn("k", seg);
    ck_assert_int_eq(upd(E.c, "c", "X-C: 1\r\n"), CACHE_OK);
    get_upd(E.c, "c", "X-C: 1\r\n", &upd_meta, 1000, 2);
    cache_key_hash(E.c, "c", 1, h);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
    churn("l", ring + seg);
    ck_assert(!cache_ring_alive(E.c->shm, e.off));
    ck_assert_int_eq(cache_lookup(E.c, "c", 1, &(struct cache_obj){ 0 }), CACHE_MISS);
    for (int i = 0; i < 8 && cache_index_get(E.c, h, &e) == CACHE_OK; i++)
        cache_manager_tick(E.c);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_MISS);

    /* Header record's bytes overwritten in place (what a lap does to a
     * stale entry): a miss, counted as damage. */
    ck_assert_int_eq(put_obj(E.c, "d", 1000, 3, 1), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "d", "X-D: 1\r\n"), CACHE_OK);
    cache_key_hash(E.c, "d", 1, h);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
    {
        struct cache_rec *r = (struct cache_rec *)(E.c->ring
                                                   + cache_seg_of(E.c->shm, e.off) * seg
                                                   + e.off % seg);
        r->abs_off += (uint64_t)E.c->g.nseg * seg;      /* "written one lap later" */
    }
    ck_assert_int_eq(cache_lookup(E.c, "d", 1, &(struct cache_obj){ 0 }), CACHE_MISS);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_MISS);   /* dropped at once */
}
END_TEST

START_TEST(test_update_restart)
{
    const uint8_t *body;
    off_t boff;
    uint8_t x = 0x55, h[16];
    struct cache_ent e;

    ck_assert_int_eq(put_obj(E.c, "s", 40000, 7, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "t", 40000, 8, 1), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "s", "X-S: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "t", "X-T: 1\r\n"), CACHE_OK);
    body = get_upd(E.c, "s", "X-S: 1\r\n", &upd_meta, 40000, 7);
    boff = (off_t)(body - E.c->map);
    env_restart(1);
    get_upd(E.c, "s", "X-S: 1\r\n", &upd_meta, 40000, 7);
    get_upd(E.c, "t", "X-T: 1\r\n", &upd_meta, 40000, 8);
    /* refresh after the restart, then a crash (no mark): both kept, the
     * body verified (its checksum) before the first hit */
    ck_assert_int_eq(upd(E.c, "s", "X-S: 2\r\n"), CACHE_OK);
    cache_close(E.c);
    E.c = NULL;
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_uint_gt(E.c->shm->trust_epoch, 0);
    get_upd(E.c, "s", "X-S: 2\r\n", &upd_meta, 40000, 7);
    /* the manager's sweep verifies and re-stamps a refreshed entry */
    cache_manager_tick(E.c);
    cache_key_hash(E.c, "t", 1, h);
    ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
    ck_assert_uint_eq(e.epoch, E.c->epoch);
    ck_assert_uint_ne(e.off, e.body_off);
    get_upd(E.c, "t", "X-T: 1\r\n", &upd_meta, 40000, 8);

    /* a body byte lost in a crash: the refreshed entry is not served, and
     * a refresh does not launder it into a trusted entry */
    cache_close(E.c);
    E.c = NULL;
    content_pwrite(&x, 1, boff + 100);
    munmap(E.area, E.arealen);
    env_shm();
    env_open();
    ck_assert_int_eq(upd(E.c, "s", "X-S: 3\r\n"), CACHE_MISS);
    ck_assert_int_eq(cache_lookup(E.c, "s", 1, &(struct cache_obj){ 0 }), CACHE_MISS);
    get_upd(E.c, "t", "X-T: 1\r\n", &upd_meta, 40000, 8);
}
END_TEST

START_TEST(test_update_corrupt)
{
    struct cache_obj o;
    off_t hrec, link;
    uint8_t x;
    struct cache_stats st;

    ck_assert_int_eq(put_obj(E.c, "a", 1000, 1, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "b", 1000, 2, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "c", 1000, 3, 1), CACHE_OK);
    ck_assert_int_eq(put_obj(E.c, "d", 1000, 4, 1), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "a", "X-A: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "b", "X-B: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "c", "X-C: 1\r\n"), CACHE_OK);
    ck_assert_int_eq(upd(E.c, "d", "X-D: 1\r\n"), CACHE_OK);
    /* a: a byte of the new header block */
    ck_assert_int_eq(cache_lookup(E.c, "a", 1, &o), CACHE_OK);
    hrec = (off_t)((uint8_t *)o.iov[0].iov_base - E.c->map);
    cache_obj_release(E.c, &o);
    /* b: the link to the body */
    ck_assert_int_eq(cache_lookup(E.c, "b", 1, &o), CACHE_OK);
    link = (off_t)((uint8_t *)o.iov[0].iov_base + o.iov[0].iov_len - E.c->map);
    cache_obj_release(E.c, &o);
    env_restart(1);
    x = 'Y';
    content_pwrite(&x, 1, hrec);
    {
        uint64_t other = 64;
        content_pwrite(&other, 8, link);
    }
    /* c: the body record's own (unserved) header block, seen through the
     * OBJECT record's head_sum */
    {
        struct cache_ent e;
        uint8_t h[16];
        cache_key_hash(E.c, "c", 1, h);
        ck_assert_int_eq(cache_index_get(E.c, h, &e), CACHE_OK);
        x = 'Z';
        content_pwrite(&x, 1, (off_t)(CACHE_HDR_SIZE
                                      + cache_seg_of(E.c->shm, e.body_off) * E.c->g.seg_size
                                      + e.body_off % E.c->g.seg_size + CACHE_REC_SIZE + 1));
    }
    env_restart(1);
    ck_assert_int_eq(cache_lookup(E.c, "a", 1, &o), CACHE_MISS);
    ck_assert_int_eq(cache_lookup(E.c, "b", 1, &o), CACHE_MISS);
    ck_assert_int_eq(cache_lookup(E.c, "c", 1, &o), CACHE_MISS);
    get_upd(E.c, "d", "X-D: 1\r\n", &upd_meta, 1000, 4);
    ck_assert_int_eq(cache_remove(E.c, "a", 1), CACHE_MISS);   /* dropped at once */
    ck_assert_int_eq(cache_remove(E.c, "b", 1), CACHE_MISS);
    cache_stats_sum(E.area, &st);
    ck_assert_uint_eq(st.c.corrupt, 3);

    /* verify mode: a damaged body under a refreshed header is caught */
    E.c->conf.verify = 1;
    ck_assert_int_eq(cache_lookup(E.c, "d", 1, &o), CACHE_OK);
    ((uint8_t *)o.iov[1].iov_base)[10] ^= 1;
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(cache_lookup(E.c, "d", 1, &o), CACHE_MISS);
}
END_TEST

/* Body length identifies the fill that wrote it (seed 1..). */
static size_t
race_len(unsigned seed)
{
    return 1000 + (size_t)seed * 37;
}

/* A hit on "race" must be one object: header block, meta and body from
 * writers that agree.  Returns the seed its body belongs to. */
static unsigned
race_check(const struct cache_obj *o)
{
    char hdr[128];
    unsigned seed, hseed, upd_n;
    size_t len = o->iov[1].iov_len;

    ck_assert_uint_gt(len, 1000);
    ck_assert_uint_eq((len - 1000) % 37, 0);
    seed = (unsigned)((len - 1000) / 37);
    for (size_t i = 0; i < len; i++)
        if (((uint8_t *)o->iov[1].iov_base)[i] != pat(seed, i))
            ck_abort_msg("race: body of seed %u has byte %zu of another", seed, i);
    ck_assert_uint_lt(o->iov[0].iov_len, sizeof(hdr));
    memcpy(hdr, o->iov[0].iov_base, o->iov[0].iov_len);
    hdr[o->iov[0].iov_len] = 0;
    if (sscanf(hdr, "X-Plain: %u\r\n", &upd_n) == 1) {
        ck_assert_int_eq(o->meta.status, 204);
        ck_assert_int_eq(o->meta.stored, -1);
        ck_assert_int_eq(o->meta.expires, 200000 + (int64_t)upd_n);
    } else if (sscanf(hdr, "X-Seed: %u\r\nX-Upd: %u\r\n", &hseed, &upd_n) == 2) {
        ck_assert_uint_eq(hseed, seed);               /* refresh of this very body */
        ck_assert_int_eq(o->meta.status, 203);
        ck_assert_int_eq(o->meta.stored, (int64_t)seed);
        ck_assert_int_eq(o->meta.expires, 100000 + (int64_t)upd_n);
    } else {
        ck_assert_int_eq(sscanf(hdr, "X-Seed: %u\r\n", &hseed), 1);
        ck_assert_uint_eq(hseed, seed);
        ck_assert_int_eq(o->meta.status, 200);
        ck_assert_int_eq(o->meta.stored, (int64_t)seed);
    }
    return seed;
}

START_TEST(test_update_race_fill)
{
    const unsigned NFILL = 300;
    struct cache_meta m;
    struct cache_obj o;
    int status, hits = 0, refreshed = 0, lost = 0;
    pid_t pid;

    /* seed 1 first, so the parent has something to refresh from the start */
    {
        static uint8_t buf[16384];
        struct cache_fill *f;
        struct cache_meta fm = { 200, 0, 1, 2000 };
        fill_pat(buf, race_len(1), 1);
        ck_assert_int_eq(cache_fill_begin(E.c, "race", 4, &fm, "X-Seed: 1\r\n", 11,
                                          (int64_t)race_len(1), &f), CACHE_OK);
        ck_assert_int_eq(cache_fill_write(f, buf, race_len(1)), CACHE_OK);
        ck_assert_int_eq(cache_fill_commit(f, NULL), CACHE_OK);
    }
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char err[256], hdr[64];
        static uint8_t buf[16384];
        struct cache *c = cache_open(&E.cf, E.area, 1, err, sizeof(err));
        if (c == NULL)
            _exit(10);
        for (unsigned s = 2; s <= NFILL; s++) {
            struct cache_fill *f;
            struct cache_meta fm = { 200, 0, (int64_t)s, 2000 };
            size_t len = race_len(s);
            int n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", s);
            fill_pat(buf, len, s);
            if (cache_fill_begin(c, "race", 4, &fm, hdr, (size_t)n,
                                 s % 2 ? (int64_t)len : -1, &f) != CACHE_OK)
                _exit(11);
            for (size_t off = 0; off < len; off += 1024)
                if (cache_fill_write(f, buf + off, len - off > 1024 ? 1024 : len - off)
                    != CACHE_OK)
                    _exit(12);
            if (cache_fill_commit(f, NULL) != CACHE_OK)
                _exit(13);
        }
        cache_close(c);
        _exit(0);
    }
    /* parent: a worker revalidating what it holds, as fast as it can */
    for (unsigned n = 0;; n++) {
        char hdr[64];
        unsigned seed;
        int len, rc;

        if (n >= 1000 && waitpid(pid, &status, WNOHANG) == pid)
            break;
        if (cache_lookup(E.c, "race", 4, &o) != CACHE_OK)
            continue;
        hits++;
        seed = race_check(&o);
        len = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\nX-Upd: %u\r\n", seed, n);
        m = (struct cache_meta){ 203, 0, (int64_t)seed, 100000 + (int64_t)n };
        rc = cache_obj_update_headers(E.c, &o, "race", 4, &m, hdr, (size_t)len);
        ck_assert_msg(rc == CACHE_OK || rc == CACHE_MISS, "%s", cache_strerror(rc));
        if (rc == CACHE_OK)
            refreshed++;
        else
            lost++;
        race_check(&o);                 /* still intact under our pins */
        cache_obj_release(E.c, &o);
        if (n % 4 == 0) {
            /* the plain call refreshes whatever body is there now: its
             * header block names no body, only itself (meta agrees) */
            len = snprintf(hdr, sizeof(hdr), "X-Plain: %u\r\n", n);
            m = (struct cache_meta){ 204, 0, -1, 200000 + (int64_t)n };
            rc = cache_update_headers(E.c, "race", 4, &m, hdr, (size_t)len);
            ck_assert_msg(rc == CACHE_OK || rc == CACHE_MISS, "%s", cache_strerror(rc));
        }
    }
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %d", status);
    ck_assert_int_gt(hits, 0);
    ck_assert_int_gt(refreshed, 0);
    /* the end state: one consistent object, the last fill or a refresh of
     * it; and it still refreshes */
    ck_assert_int_eq(cache_lookup(E.c, "race", 4, &o), CACHE_OK);
    ck_assert_uint_eq(race_check(&o), NFILL);
    m = (struct cache_meta){ 203, 0, NFILL, 100000 + 7 };
    ck_assert_int_eq(cache_obj_update_headers(E.c, &o, "race", 4, &m,
                                              "X-Seed: 300\r\nX-Upd: 7\r\n", 24), CACHE_OK);
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(cache_lookup(E.c, "race", 4, &o), CACHE_OK);
    ck_assert_uint_eq(race_check(&o), NFILL);
    ck_assert_int_eq(o.meta.expires, 100007);
    cache_obj_release(E.c, &o);
    ck_assert_uint_eq(obj_entries(E.c), 1);
    ck_assert_int_eq(refreshed + lost, hits);
}
END_TEST

/* ------------------------------------------------------------------ */
/* Eviction (S3-FIFO: frequency counters, hot records rewritten at the head) */

/* Start over with a fresh store of this size and eviction policy.  The
 * eviction tests give the index room (4 MiB): with no manager sweeping,
 * a full index would raise the ring floor, which evicts hot and cold
 * alike and is not what they test. */
static void
env_reset(int64_t size, int eviction)
{
    teardown();
    memset(&E, 0, sizeof(E));
    strcpy(E.dir, "/tmp/check_cache.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(E.dir));
    E.cf.dir = E.dir;
    E.cf.size = size;
    E.cf.index_mapsize = 4 * MiB;
    E.cf.eviction = eviction;
    env_shm();
    env_open();
}

/* put_obj with fresh meta (expires in an hour), or stale when ttl < 0. */
static int
put_fresh(struct cache *c, const char *key, size_t len, unsigned seed, int64_t ttl)
{
    static uint8_t buf[256 * 1024];
    struct cache_meta m = { 200, 0, 1000, (int64_t)time(NULL) + ttl };
    struct cache_fill *f;
    char hdr[64];
    int rc, n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", seed);

    ck_assert_uint_le(len, sizeof(buf));
    fill_pat(buf, len, seed);
    if ((rc = cache_fill_begin(c, key, strlen(key), &m, hdr, (size_t)n, (int64_t)len, &f))
        != CACHE_OK)
        return rc;
    if ((rc = cache_fill_write(f, buf, len)) != CACHE_OK) {
        cache_fill_abort(f);
        return rc;
    }
    return cache_fill_commit(f, NULL);
}

/* CACHE_OK when key is a hit whose header block is hdr (NULL: X-Seed) and
 * whose body is exactly pat(seed) of len bytes; *where gets the body's
 * address in the mapping. */
static int
get_fresh(struct cache *c, const char *key, size_t len, unsigned seed, const char *hdr,
          const uint8_t **where)
{
    struct cache_obj o;
    char want[64];
    int rc = cache_lookup(c, key, strlen(key), &o);

    if (rc != CACHE_OK)
        return rc;
    if (hdr == NULL) {
        snprintf(want, sizeof(want), "X-Seed: %u\r\n", seed);
        hdr = want;
    }
    ck_assert_uint_eq(o.iov[0].iov_len, strlen(hdr));
    ck_assert(memcmp(o.iov[0].iov_base, hdr, strlen(hdr)) == 0);
    ck_assert_uint_eq(o.body_len, len);
    /* span by span: a large object's body is in several extents */
    for (size_t i = 0; i < len;) {
        const void *p;
        size_t k = cache_obj_span(c, &o, i, &p);

        ck_assert_uint_gt(k, 0);
        if (i == 0)
            ck_assert(p == o.iov[1].iov_base && k == o.iov[1].iov_len);
        for (size_t j = 0; j < k; j++)
            if (((const uint8_t *)p)[j] != pat(seed, i + j))
                ck_abort_msg("%s: byte %zu differs", key, i + j);
        i += k;
    }
    if (where)
        *where = o.iov[1].iov_base;
    cache_obj_release(c, &o);
    return CACHE_OK;
}

/* Write `laps` rings' worth of cold 40 KB objects named prefix<n>. */
static int
cold_laps(struct cache *c, const char *prefix, double laps, int from)
{
    uint64_t ring = (uint64_t)c->g.nseg * c->g.seg_size;
    char key[32];
    int n;

    for (n = 0; (double)n * 40000 < laps * (double)ring; n++) {
        snprintf(key, sizeof(key), "%s%d", prefix, from + n);
        ck_assert_int_eq(put_fresh(c, key, 40000, (unsigned)(from + n), 3600), CACHE_OK);
    }
    return from + n;
}

START_TEST(test_freq_logic)
{
    uint8_t a[16] = { 0 }, b[16] = { 0 };
    struct cache_obj o;

    a[8] = 1;
    b[8] = 2;
    ck_assert_uint_eq(cache_freq_get(E.c, a), 0);
    cache_freq_bump(E.c, a);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 1);
    ck_assert_uint_eq(cache_freq_get(E.c, b), 0);       /* its own counter */
    for (int i = 0; i < 10; i++)
        cache_freq_bump(E.c, a);
    ck_assert_uint_eq(cache_freq_get(E.c, a), CACHE_FREQ_MAX);   /* saturates */
    ck_assert_uint_eq(cache_freq_decay(E.c, a), CACHE_FREQ_MAX);
    ck_assert_uint_eq(cache_freq_get(E.c, a), CACHE_FREQ_MAX - 1);
    for (int i = 0; i < 5; i++)
        cache_freq_decay(E.c, a);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 0);       /* and stops at 0 */
    cache_freq_bump(E.c, a);
    cache_freq_clear(E.c, a);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 0);
    ck_assert_uint_ge(E.c->shm->freq_mask + 1, CACHE_FREQ_MIN);

    /* b shares a's byte (same low bits) with another tag (high bits):
     * neither reads nor decays a's count; its hits age a's, and take the
     * byte over once a's count is down to 1 */
    memcpy(b, a, 16);
    b[15] ^= 0x80;
    for (int i = 0; i < 3; i++)
        cache_freq_bump(E.c, a);
    ck_assert_uint_eq(cache_freq_get(E.c, b), 0);
    ck_assert_uint_eq(cache_freq_decay(E.c, b), 0);
    cache_freq_clear(E.c, b);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 3);
    cache_freq_bump(E.c, b);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 2);
    ck_assert_uint_eq(cache_freq_get(E.c, b), 0);
    cache_freq_bump(E.c, b);
    cache_freq_bump(E.c, b);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 0);
    ck_assert_uint_eq(cache_freq_get(E.c, b), 1);

    /* hits bump (a miss and a fill do not) */
    ck_assert_int_eq(cache_lookup(E.c, "f", 1, &o), CACHE_MISS);
    ck_assert_int_eq(put_fresh(E.c, "f", 100, 1, 3600), CACHE_OK);
    cache_key_hash(E.c, "f", 1, a);
    ck_assert_uint_eq(cache_freq_get(E.c, a), 0);
    ck_assert_int_eq(get_fresh(E.c, "f", 100, 1, NULL, NULL), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "f", 1, &o), CACHE_OK);
    ck_assert_uint_eq(cache_freq_get(E.c, o.key_hash), 2);
    cache_obj_release(E.c, &o);

    /* FIFO: no counting at all */
    env_reset(24 * MiB, CACHE_EVICT_FIFO);
    ck_assert_int_eq(put_fresh(E.c, "f", 100, 1, 3600), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "f", 1, &o), CACHE_OK);
    ck_assert_uint_eq(cache_freq_get(E.c, o.key_hash), 0);
    cache_obj_release(E.c, &o);
}
END_TEST

/* A hot object survives lap after lap, byte-identical, while the cold
 * ones written around it pass through; once nobody asks for it any more
 * it is gone within CACHE_FREQ_MAX + 1 laps. */
START_TEST(test_evict_hot_survives)
{
    struct cache_stats st;
    const uint8_t *where, *first;
    int n = 0;

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);

    ck_assert_int_eq(put_fresh(E.c, "hot", 50000, 77, 3600), CACHE_OK);
    ck_assert_int_eq(put_fresh(E.c, "warm", 50000, 78, 3600), CACHE_OK);
    ck_assert_int_eq(get_fresh(E.c, "hot", 50000, 77, NULL, &first), CACHE_OK);
    ck_assert_int_eq(get_fresh(E.c, "warm", 50000, 78, NULL, NULL), CACHE_OK); /* once */
    for (int lap = 0; lap < 5; lap++) {
        int from = n;
        n = cold_laps(E.c, "c", 1.0, n);
        ck_assert_int_eq(get_fresh(E.c, "hot", 50000, 77, NULL, &where), CACHE_OK);
        /* the cold objects of the lap before this one are gone */
        if (lap > 0) {
            char key[32];
            snprintf(key, sizeof(key), "c%d", from - 1 - (n - from) / 2);
            ck_assert_int_eq(get_fresh(E.c, key, 40000, 0, NULL, NULL), CACHE_MISS);
        }
    }
    ck_assert_ptr_ne(where, first);             /* it moved, and is intact */
    /* warm was hit once: it got one more lap, not five */
    ck_assert_int_eq(get_fresh(E.c, "warm", 50000, 78, NULL, NULL), CACHE_MISS);
    cache_stats_sum(E.area, &st);
    ck_assert_uint_ge(st.c.relocations, 5);
    ck_assert_uint_gt(st.c.bytes_relocated, 5 * 50000);
    ck_assert_uint_ge(E.c->shm->cur_seg, 5 * E.c->g.nseg);

    /* nobody asks any more: at most CACHE_FREQ_MAX more laps */
    n = cold_laps(E.c, "c", CACHE_FREQ_MAX + 1.5, n);
    ck_assert_int_eq(get_fresh(E.c, "hot", 50000, 77, NULL, NULL), CACHE_MISS);
}
END_TEST

/* The same trace under plain FIFO: the hot object dies in its first lap. */
START_TEST(test_evict_fifo_mode)
{
    struct cache_stats st;

    env_reset(24 * MiB, CACHE_EVICT_FIFO);
    ck_assert_int_eq(put_fresh(E.c, "hot", 50000, 77, 3600), CACHE_OK);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(get_fresh(E.c, "hot", 50000, 77, NULL, NULL), CACHE_OK);
    cold_laps(E.c, "c", 1.0, 0);
    ck_assert_int_eq(get_fresh(E.c, "hot", 50000, 77, NULL, NULL), CACHE_MISS);
    cache_stats_sum(E.area, &st);
    ck_assert_uint_eq(st.c.relocations, 0);
}
END_TEST

/* Stale (expired) hot objects are not kept, and their counter is reset. */
START_TEST(test_evict_stale_not_kept)
{
    struct cache_obj o;
    uint8_t hash[16];

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);

    ck_assert_int_eq(put_fresh(E.c, "stale", 50000, 5, -10), CACHE_OK);
    ck_assert_int_eq(put_fresh(E.c, "fresh", 50000, 6, 3600), CACHE_OK);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(get_fresh(E.c, "stale", 50000, 5, NULL, NULL), CACHE_OK);
        ck_assert_int_eq(get_fresh(E.c, "fresh", 50000, 6, NULL, NULL), CACHE_OK);
    }
    ck_assert_int_eq(cache_lookup(E.c, "stale", 5, &o), CACHE_OK);
    memcpy(hash, o.key_hash, 16);
    cache_obj_release(E.c, &o);
    cold_laps(E.c, "c", 1.2, 0);
    ck_assert_int_eq(get_fresh(E.c, "stale", 50000, 5, NULL, NULL), CACHE_MISS);
    ck_assert_int_eq(get_fresh(E.c, "fresh", 50000, 6, NULL, NULL), CACHE_OK);
    ck_assert_uint_eq(cache_freq_get(E.c, hash), 0);
}
END_TEST

/* A refreshed object (HEADERS record + older body) is rewritten as one
 * OBJECT record with the refreshed header block and meta. */
START_TEST(test_evict_refreshed)
{
    struct cache_meta m = { 203, 0x11, 3000, (int64_t)time(NULL) + 7200 };
    struct cache_obj o;

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);

    ck_assert_int_eq(put_fresh(E.c, "r", 60000, 9, 3600), CACHE_OK);
    ck_assert_int_eq(cache_update_headers(E.c, "r", 1, &m, "X-New: 1\r\n", 10), CACHE_OK);
    for (int lap = 0; lap < 3; lap++) {
        ck_assert_int_eq(get_fresh(E.c, "r", 60000, 9, "X-New: 1\r\n", NULL), CACHE_OK);
        cold_laps(E.c, "c", 1.0, lap * 1000);
    }
    ck_assert_int_eq(cache_lookup(E.c, "r", 1, &o), CACHE_OK);
    ck_assert_int_eq(o.meta.status, 203);
    ck_assert_int_eq(o.meta.flags, 0x11);
    ck_assert_int_eq(o.meta.expires, m.expires);
    ck_assert_int_eq(o.co_pinned, 1);          /* one record again */
    cache_obj_release(E.c, &o);
    ck_assert_int_eq(get_fresh(E.c, "r", 60000, 9, "X-New: 1\r\n", NULL), CACHE_OK);
}
END_TEST

/* A reader holding the hot object keeps its bytes (the head skips its
 * segment), while new readers get the relocated copy. */
START_TEST(test_evict_respects_pins)
{
    static uint8_t copy[50000];
    struct cache_obj held;
    const uint8_t *where;

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);

    ck_assert_int_eq(put_fresh(E.c, "hot", sizeof(copy), 3, 3600), CACHE_OK);
    ck_assert_int_eq(cache_lookup(E.c, "hot", 3, &held), CACHE_OK);
    memcpy(copy, held.iov[1].iov_base, sizeof(copy));
    for (int lap = 0; lap < 3; lap++) {
        cold_laps(E.c, "c", 1.0, lap * 1000);
        ck_assert_int_eq(get_fresh(E.c, "hot", sizeof(copy), 3, NULL, &where), CACHE_OK);
        ck_assert_ptr_ne(where, held.iov[1].iov_base);
        ck_assert(memcmp(copy, held.iov[1].iov_base, sizeof(copy)) == 0);
    }
    cache_obj_release(E.c, &held);
}
END_TEST

/* Everything hot: the relocation budget (half a segment per segment)
 * still lets the ring move on and take new objects. */
START_TEST(test_evict_budget)
{
    struct cache_stats st;
    uint64_t start = E.c->shm->cur_seg, entered;
    char key[32];

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);

    for (int n = 0; n < 1500; n++) {
        snprintf(key, sizeof(key), "h%d", n);
        ck_assert_int_eq(put_fresh(E.c, key, 40000, (unsigned)n, 3600), CACHE_OK);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(get_fresh(E.c, key, 40000, (unsigned)n, NULL, NULL), CACHE_OK);
    }
    /* the newest are all there */
    for (int n = 1400; n < 1500; n++) {
        snprintf(key, sizeof(key), "h%d", n);
        ck_assert_int_eq(get_fresh(E.c, key, 40000, (unsigned)n, NULL, NULL), CACHE_OK);
    }
    cache_stats_sum(E.area, &st);
    entered = E.c->shm->cur_seg - start;
    ck_assert_uint_gt(st.c.relocations, 0);
    ck_assert_uint_le(st.c.bytes_relocated, (entered + 1) * E.c->g.seg_size / 2);
    ck_assert_uint_gt(entered, 2 * E.c->g.nseg);
}
END_TEST

/* Relocation racing fills, refreshes and removals of the same key from
 * other processes: every hit is one consistent object, and a removal is
 * never undone.  Body length and pattern name the fill (race_len); the
 * header block names it too, plus the refresh. */
static unsigned
erace_check(const struct cache_obj *o)
{
    char hdr[128];
    unsigned seed, hseed, u;
    size_t len = o->iov[1].iov_len;

    ck_assert_uint_gt(len, 1000);
    ck_assert_uint_eq((len - 1000) % 37, 0);
    seed = (unsigned)((len - 1000) / 37);
    for (size_t i = 0; i < len; i++)
        if (((uint8_t *)o->iov[1].iov_base)[i] != pat(seed, i))
            ck_abort_msg("erace: body of seed %u has byte %zu of another", seed, i);
    ck_assert_uint_lt(o->iov[0].iov_len, sizeof(hdr));
    memcpy(hdr, o->iov[0].iov_base, o->iov[0].iov_len);
    hdr[o->iov[0].iov_len] = 0;
    if (sscanf(hdr, "X-Seed: %u\r\nX-Upd: %u\r\n", &hseed, &u) == 2)
        ck_assert_int_eq(o->meta.status, 203);
    else
        ck_assert_int_eq(sscanf(hdr, "X-Seed: %u\r\n", &hseed), 1);
    ck_assert_uint_eq(hseed, seed);
    ck_assert_int_eq(o->meta.stored, (int64_t)seed);
    return seed;
}

static int
erace_fill(struct cache *c, unsigned s)
{
    static uint8_t buf[16384];
    struct cache_meta fm = { 200, 0, (int64_t)s, (int64_t)time(NULL) + 3600 };
    struct cache_fill *f;
    char hdr[64];
    int n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\n", s);

    fill_pat(buf, race_len(s), s);
    if (cache_fill_begin(c, "erace", 5, &fm, hdr, (size_t)n, (int64_t)race_len(s), &f)
        != CACHE_OK)
        return -1;
    if (cache_fill_write(f, buf, race_len(s)) != CACHE_OK) {
        cache_fill_abort(f);
        return -1;
    }
    return cache_fill_commit(f, NULL) == CACHE_OK ? 0 : -1;
}

/* Drive the ring with cold objects and hit "erace" (making it hot) until
 * *stop; returns hits. */
static int
erace_drive(struct cache *c, const char *prefix, volatile int *stop, int max_n)
{
    struct cache_obj o;
    char key[32];
    int hits = 0;

    for (int n = 0; (stop == NULL || !*stop) && n < max_n; n++) {
        /* a bounded key set: no manager sweeps this index */
        snprintf(key, sizeof(key), "%s%d", prefix, n % 1000);
        if (put_fresh(c, key, 30000, (unsigned)n, 3600) != CACHE_OK)
            ck_abort_msg("cold fill failed");
        for (int k = 0; k < 2; k++)
            if (cache_lookup(c, "erace", 5, &o) == CACHE_OK) {
                erace_check(&o);
                cache_obj_release(c, &o);
                hits++;
            }
    }
    return hits;
}

START_TEST(test_evict_race)
{
    struct cache_stats st;
    struct cache_obj o;
    int status, hits;
    pid_t a, b;
    volatile int *done = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                              MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    env_reset(24 * MiB, CACHE_EVICT_S3FIFO);
    ck_assert_ptr_ne((void *)done, MAP_FAILED);
    *done = 0;
    ck_assert_int_eq(erace_fill(E.c, 1), 0);
    /* a: fills now and then, refreshes and removes in between, slowly
     * enough that its objects age into the segments being prepared */
    a = fork();
    ck_assert_int_ge(a, 0);
    if (a == 0) {
        char err[256], hdr[64];
        struct cache *c = cache_open(&E.cf, E.area, 1, err, sizeof(err));
        unsigned seed = 1;
        if (c == NULL)
            _exit(10);
        /* Paced by the ring, not the clock (valgrind is slow): each body
         * ages a lap and a bit, so the drivers' hits get it relocated at
         * least once, while this process keeps refreshing it and then
         * removes or replaces it at whatever point the relocation is. */
        for (unsigned cycle = 0, i = 0; cycle < 12; cycle++) {
            uint64_t target = c->shm->cur_seg + c->g.nseg + cycle % 3;

            if (erace_fill(c, ++seed) < 0)
                _exit(11);
            while (__atomic_load_n(&c->shm->cur_seg, __ATOMIC_SEQ_CST) < target) {
                i++;
                if (cache_lookup(c, "erace", 5, &o) == CACHE_OK) {
                    unsigned sd = erace_check(&o);
                    struct cache_meta m = { 203, 0, (int64_t)sd, (int64_t)time(NULL) + 3600 };
                    int n = snprintf(hdr, sizeof(hdr), "X-Seed: %u\r\nX-Upd: %u\r\n", sd, i);
                    int rc = cache_obj_update_headers(c, &o, "erace", 5, &m, hdr, (size_t)n);
                    if (rc != CACHE_OK && rc != CACHE_MISS)
                        _exit(16);
                    erace_check(&o);
                    cache_obj_release(c, &o);
                }
                usleep(500);
            }
            if (cycle % 2) {
                if (cache_remove(c, "erace", 5) == CACHE_ERROR)
                    _exit(12);
                if (cache_lookup(c, "erace", 5, &o) != CACHE_MISS)
                    _exit(13);              /* resurrected */
                usleep(3000);
                if (cache_lookup(c, "erace", 5, &o) != CACHE_MISS)
                    _exit(14);
            }
        }
        /* last word: removed, and it must stay removed */
        if (cache_remove(c, "erace", 5) == CACHE_ERROR)
            _exit(17);
        cache_close(c);
        _exit(0);
    }
    /* b: a second process moving the head (so relocations run there too) */
    b = fork();
    ck_assert_int_ge(b, 0);
    if (b == 0) {
        char err[256];
        struct cache *c = cache_open(&E.cf, E.area, 2, err, sizeof(err));
        if (c == NULL)
            _exit(10);
        erace_drive(c, "b", done, 1 << 30);
        cache_close(c);
        _exit(0);
    }
    hits = 0;
    while (waitpid(a, &status, WNOHANG) != a)
        hits += erace_drive(E.c, "p", NULL, 20);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "a: %d", status);
    /* removed for good: two more laps relocate nothing back */
    erace_drive(E.c, "q", NULL, 1200);
    *done = 1;
    ck_assert_int_eq(waitpid(b, &status, 0), b);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "b: %d", status);
    ck_assert_int_eq(cache_lookup(E.c, "erace", 5, &o), CACHE_MISS);
    cache_stats_sum(E.area, &st);
    ck_assert_int_gt(hits, 0);
    ck_assert_uint_gt(st.c.relocations, 0);     /* the race did happen */
    munmap((void *)done, 4096);
}
END_TEST

static Suite *
cache_suite(void)
{
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("store");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_geometry);
    tcase_add_test(tc, test_roundtrip);
    tcase_add_test(tc, test_unknown_length_and_limits);
    tcase_add_test(tc, test_fill_slots);
    tcase_add_test(tc, test_wrap_and_lapping);
    tcase_add_test(tc, test_pin_prevents_overwrite);
    tcase_add_test(tc, test_dead_slot_pin_and_lock);
    tcase_add_test(tc, test_concurrent_fills);
    tcase_add_test(tc, test_corrupt_magic_and_record);
    tcase_add_test(tc, test_corrupt_wrong_key_and_lengths);
    tcase_add_test(tc, test_corrupt_body_checksum);
    tcase_add_test(tc, test_unclean_shutdown);
    tcase_add_test(tc, test_restart_persistence);
    tcase_add_test(tc, test_layout_version_reinit);
    tcase_add_test(tc, test_large_objects);
    tcase_add_test(tc, test_layout_v1_upgraded);
    tcase_add_test(tc, test_wrong_size_content);
    tcase_add_test(tc, test_map_full);
    tcase_add_test(tc, test_purge_tags_parse);
    tcase_add_test(tc, test_purge_exact);
    tcase_add_test(tc, test_purge_tables_upgrade);
    tcase_add_test(tc, test_damaged_index_rebuilt);
    tcase_add_test(tc, test_shm_validation);
    tcase_add_test(tc, test_update_headers);
    tcase_add_test(tc, test_update_repeated);
    tcase_add_test(tc, test_update_remove);
    tcase_add_test(tc, test_update_lapping);
    tcase_add_test(tc, test_update_restart);
    tcase_add_test(tc, test_update_corrupt);
    tcase_add_test(tc, test_update_race_fill);
    tcase_add_test(tc, test_freq_logic);
    tcase_add_test(tc, test_evict_hot_survives);
    tcase_add_test(tc, test_evict_fifo_mode);
    tcase_add_test(tc, test_evict_stale_not_kept);
    tcase_add_test(tc, test_evict_refreshed);
    tcase_add_test(tc, test_evict_respects_pins);
    tcase_add_test(tc, test_evict_budget);
    tcase_add_test(tc, test_evict_race);
    suite_add_tcase(s, tc);
    return s;
}

int
main(void)
{
    SRunner *sr = srunner_create(cache_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
