/*
 * scripts/bench-zipf.c: hit ratio of the store's eviction, FIFO vs S3-FIFO.
 *
 * Replays one deterministic Zipf(alpha) request trace over N objects,
 * N = ten times what fits in the store, straight against the cache API
 * (no HTTP): cache_lookup(); on a miss cache_fill_begin/write/commit of
 * the whole object, as a worker would after fetching it.  The same trace
 * runs twice on a fresh store each time, once per policy
 * (cache_conf.eviction), and the hit ratios are printed side by side.
 * cache_manager_tick() runs every `tick` requests, standing in for the
 * manager's once-a-second housekeeping (it sweeps lapped entries out of
 * the index, so the index never fills and never raises the ring floor).
 *
 * Object sizes are uniform in [min, max] (a hash of the object number, so
 * the same in both runs); the first `warm` requests fill the store and
 * are not counted.  The relocation work of S3-FIFO runs inside the fill
 * whose reservation moves the head into a new segment, so the bench also
 * reports the time spent in cache_fill_begin (total, p99, max): that is
 * the cost the eviction adds to the hot path.
 *
 * Built and run by scripts/bench-zipf.sh (gcc against the cache sources).
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"

struct opts {
    int64_t  size;
    uint64_t requests;
    uint64_t warm;
    double   alpha;
    uint64_t seed;
    uint32_t min, max;
    uint64_t objects;           /* 0: ten times what fits */
    uint64_t tick;
    const char *tmp;
};

struct result {
    uint64_t reqs, hits, bytes, hit_bytes, fills, fill_fail;
    uint64_t relocations, bytes_relocated;
    double   secs, begin_total_ms, begin_p99_us, begin_max_us;
};

static uint64_t
mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t rng_state;

static double
rng_unit(void)
{
    rng_state += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(rng_state) >> 11) / 9007199254740992.0;
}

static uint32_t
obj_size(const struct opts *o, uint64_t id)
{
    return o->min + (uint32_t)(mix64(id ^ 0x5a5a5a5a) % (uint64_t)(o->max - o->min + 1));
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static void
rm_store(const char *dir)
{
    char p[600];

    snprintf(p, sizeof(p), "%s/index/data.mdb", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/index/lock.mdb", dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/index", dir);
    rmdir(p);
    snprintf(p, sizeof(p), "%s/content", dir);
    unlink(p);
    rmdir(dir);
}

static int
run(const struct opts *o, int eviction, const double *cdf, uint64_t n, struct result *res)
{
    static uint8_t body[1 << 20];
    struct cache_conf cf;
    struct cache_stats st;
    struct cache *c;
    char dir[512], err[256], key[64], hdr[64];
    uint32_t *lat;
    uint64_t nlat = 0;
    size_t len;
    void *area;
    double t0;

    memset(res, 0, sizeof(*res));
    snprintf(dir, sizeof(dir), "%s/bench-zipf.XXXXXX", o->tmp);
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return -1;
    }
    memset(&cf, 0, sizeof(cf));
    cf.dir = dir;
    cf.size = o->size;
    cf.eviction = eviction;
    len = cache_shm_size(&cf, 1);
    area = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (len == 0 || area == MAP_FAILED || cache_shm_init(area, len, &cf, 1) != CACHE_OK
        || cache_store_prepare(&cf, err, sizeof(err)) != CACHE_OK
        || (c = cache_open(&cf, area, 0, err, sizeof(err))) == NULL) {
        fprintf(stderr, "bench-zipf: cannot set up the store: %s\n", err);
        return -1;
    }
    lat = calloc(o->requests, sizeof(*lat));
    for (size_t i = 0; i < sizeof(body); i++)
        body[i] = (uint8_t)(i * 7 + 3);
    rng_state = o->seed;
    t0 = now_s();
    for (uint64_t r = 0; r < o->requests; r++) {
        double u = rng_unit();
        uint64_t lo = 0, hi = n - 1, id;
        struct cache_obj obj;
        int counted = r >= o->warm, kl, hl;
        uint32_t sz;

        while (lo < hi) {           /* first rank whose cdf >= u */
            uint64_t mid = (lo + hi) / 2;
            if (cdf[mid] >= u)
                hi = mid;
            else
                lo = mid + 1;
        }
        id = lo;
        sz = obj_size(o, id);
        kl = snprintf(key, sizeof(key), "http://bench.example/obj/%llu", (unsigned long long)id);
        if (counted) {
            res->reqs++;
            res->bytes += sz;
        }
        if (cache_lookup(c, key, (size_t)kl, &obj) == CACHE_OK) {
            if (obj.body_len != sz) {
                fprintf(stderr, "bench-zipf: object %llu has %llu bytes, not %u\n",
                        (unsigned long long)id, (unsigned long long)obj.body_len, sz);
                return -1;
            }
            cache_obj_release(c, &obj);
            if (counted) {
                res->hits++;
                res->hit_bytes += sz;
            }
        } else {
            struct cache_meta m = { 200, 0, (int64_t)time(NULL), (int64_t)time(NULL) + 86400 };
            struct cache_fill *f;
            double b0 = now_s();
            int rc;

            hl = snprintf(hdr, sizeof(hdr), "HTTP/1.1 200 OK\r\nX-Id: %llu\r\n",
                          (unsigned long long)id);
            rc = cache_fill_begin(c, key, (size_t)kl, &m, hdr, (size_t)hl, sz, &f);
            lat[nlat++] = (uint32_t)((now_s() - b0) * 1e6);
            if (rc == CACHE_OK) {
                for (uint32_t off = 0; rc == CACHE_OK && off < sz; off += sizeof(body))
                    rc = cache_fill_write(f, body, sz - off > sizeof(body) ? sizeof(body)
                                                                         : sz - off);
                if (rc == CACHE_OK)
                    rc = cache_fill_commit(f, NULL);
                else
                    cache_fill_abort(f);
            }
            if (rc == CACHE_OK)
                res->fills++;
            else
                res->fill_fail++;
        }
        if (o->tick && r % o->tick == o->tick - 1)
            cache_manager_tick(c);
    }
    res->secs = now_s() - t0;
    for (uint64_t i = 0; i < nlat; i++)
        res->begin_total_ms += lat[i] / 1000.0;
    if (nlat) {
        qsort(lat, nlat, sizeof(*lat), cmp_u32);
        res->begin_p99_us = lat[nlat * 99 / 100];
        res->begin_max_us = lat[nlat - 1];
    }
    free(lat);
    cache_stats_sum(area, &st);
    res->relocations = st.c.relocations;
    res->bytes_relocated = st.c.bytes_relocated;
    cache_close(c);
    munmap(area, len);
    rm_store(dir);
    return 0;
}

static void
usage(void)
{
    fprintf(stderr,
            "usage: bench-zipf [-s store_MiB] [-r requests] [-w warmup] [-a alpha]\n"
            "                  [-S seed] [-m min_KiB] [-M max_KiB] [-n objects] [-t tick]\n"
            "                  [-d tmpdir]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    struct opts o = { .size = 64ll << 20, .requests = 1000000, .warm = 100000, .alpha = 0.9,
                      .seed = 42, .min = 8 << 10, .max = 64 << 10, .tick = 250,
                      .tmp = "/tmp" };
    struct cache_conf cf;
    struct result fifo, s3;
    double *cdf, sum = 0;
    uint64_t fits;
    int ch;

    while ((ch = getopt(argc, argv, "s:r:w:a:S:m:M:n:t:d:")) != -1) {
        switch (ch) {
        case 's': o.size = atoll(optarg) << 20; break;
        case 'r': o.requests = strtoull(optarg, NULL, 10); break;
        case 'w': o.warm = strtoull(optarg, NULL, 10); break;
        case 'a': o.alpha = atof(optarg); break;
        case 'S': o.seed = strtoull(optarg, NULL, 10); break;
        case 'm': o.min = (uint32_t)atoi(optarg) << 10; break;
        case 'M': o.max = (uint32_t)atoi(optarg) << 10; break;
        case 'n': o.objects = strtoull(optarg, NULL, 10); break;
        case 't': o.tick = strtoull(optarg, NULL, 10); break;
        case 'd': o.tmp = optarg; break;
        default: usage();
        }
    }
    if (o.min == 0 || o.max < o.min || o.requests <= o.warm)
        usage();
    setenv("CACHE_TEST_QUIET", "1", 0);
    memset(&cf, 0, sizeof(cf));
    cf.size = o.size;
    cf.dir = "/";
    /* what fits: content bytes / mean record (body + ~150 bytes of record,
     * key and header block) */
    {
        size_t len = cache_shm_size(&cf, 1);
        if (len == 0) {
            fprintf(stderr, "bench-zipf: store too small\n");
            return 2;
        }
    }
    fits = (uint64_t)((double)(o.size - o.size / 32) / ((o.min + o.max) / 2.0 + 150));
    if (o.objects == 0)
        o.objects = 10 * fits;
    cdf = malloc(o.objects * sizeof(*cdf));
    for (uint64_t i = 0; i < o.objects; i++) {
        sum += 1.0 / pow((double)(i + 1), o.alpha);
        cdf[i] = sum;
    }
    for (uint64_t i = 0; i < o.objects; i++)
        cdf[i] /= sum;
    cdf[o.objects - 1] = 1.0;

    printf("Zipf(%.2f) trace: %llu requests (first %llu not counted), %llu objects of "
           "%u-%u KiB (~%llu fit), store %lld MiB, seed %llu\n",
           o.alpha, (unsigned long long)o.requests, (unsigned long long)o.warm,
           (unsigned long long)o.objects, o.min >> 10, o.max >> 10,
           (unsigned long long)fits, (long long)(o.size >> 20), (unsigned long long)o.seed);
    fflush(stdout);
    if (run(&o, CACHE_EVICT_FIFO, cdf, o.objects, &fifo) < 0
        || run(&o, CACHE_EVICT_S3FIFO, cdf, o.objects, &s3) < 0)
        return 1;
    printf("%-26s %14s %14s\n", "", "FIFO", "S3-FIFO");
    printf("%-26s %13.2f%% %13.2f%%\n", "hit ratio (requests)",
           100.0 * fifo.hits / fifo.reqs, 100.0 * s3.hits / s3.reqs);
    printf("%-26s %13.2f%% %13.2f%%\n", "hit ratio (bytes)",
           100.0 * fifo.hit_bytes / fifo.bytes, 100.0 * s3.hit_bytes / s3.bytes);
    printf("%-26s %14llu %14llu\n", "fills", (unsigned long long)fifo.fills,
           (unsigned long long)s3.fills);
    printf("%-26s %14llu %14llu\n", "failed fills", (unsigned long long)fifo.fill_fail,
           (unsigned long long)s3.fill_fail);
    printf("%-26s %14llu %14llu\n", "relocations", (unsigned long long)fifo.relocations,
           (unsigned long long)s3.relocations);
    printf("%-26s %14.1f %14.1f\n", "relocated MiB", fifo.bytes_relocated / 1048576.0,
           s3.bytes_relocated / 1048576.0);
    printf("%-26s %14.1f %14.1f\n", "fill_begin total ms", fifo.begin_total_ms,
           s3.begin_total_ms);
    printf("%-26s %14.0f %14.0f\n", "fill_begin p99 us", fifo.begin_p99_us, s3.begin_p99_us);
    printf("%-26s %14.0f %14.0f\n", "fill_begin max us", fifo.begin_max_us, s3.begin_max_us);
    printf("%-26s %14.2f %14.2f\n", "run seconds", fifo.secs, s3.secs);
    free(cdf);
    return 0;
}
