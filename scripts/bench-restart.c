/*
 * scripts/bench-restart.c: fill a store with many small objects through
 * the cache API, as a stopped daemon would have left it.
 *
 *     bench-restart-fill DIR SIZE_MiB COUNT BODY_BYTES KEY_PREFIX
 *
 * Prepares the store under DIR with the geometry of a SIZE_MiB
 * storage.config line, stores COUNT objects under KEY_PREFIX<i> (the
 * worker's cache key: the remapped URL, see worker/store.c store_key),
 * each a 200 response with a header block as a worker stores it and a
 * fresh lifetime of a day, then records a clean shutdown.  Prints the
 * number stored and the time taken.  Used by scripts/bench-restart.sh,
 * which then starts the daemon on that store and times the first hit.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "cache/cache.h"

int
main(int argc, char **argv)
{
    static char body[1 << 16];
    struct cache_conf cf;
    struct cache *c;
    struct timespec t0, t1;
    char err[256], key[512], hdr[256];
    unsigned long count, blen, stored = 0;
    size_t len;
    void *area;

    if (argc != 6) {
        fprintf(stderr, "usage: %s DIR SIZE_MiB COUNT BODY_BYTES KEY_PREFIX\n", argv[0]);
        return 2;
    }
    memset(&cf, 0, sizeof(cf));
    cf.dir = argv[1];
    cf.size = atoll(argv[2]) << 20;
    count = strtoul(argv[3], NULL, 10);
    blen = strtoul(argv[4], NULL, 10);
    if (blen > sizeof(body))
        blen = sizeof(body);
    memset(body, 'x', sizeof(body));
    setenv("CACHE_TEST_QUIET", "1", 0);
    len = cache_shm_size(&cf, 1);
    area = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
               : MAP_FAILED;
    if (area == MAP_FAILED || cache_shm_init(area, len, &cf, 1) != CACHE_OK
        || cache_store_prepare(&cf, err, sizeof(err)) != CACHE_OK
        || (c = cache_open(&cf, area, 0, err, sizeof(err))) == NULL) {
        fprintf(stderr, "bench-restart-fill: %s\n", err);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (unsigned long i = 0; i < count; i++) {
        struct cache_meta m = { 200, 0, (int64_t)time(NULL), (int64_t)time(NULL) + 86400 };
        struct cache_fill *f;
        int kl = snprintf(key, sizeof(key), "%s%lu", argv[5], i);
        int hl = snprintf(hdr, sizeof(hdr),
                          "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                          "Cache-Control: max-age=86400\r\nX-Obj: %lu\r\n", i);

        if (cache_fill_begin(c, key, (size_t)kl, &m, hdr, (size_t)hl, (int64_t)blen, &f)
            != CACHE_OK)
            continue;
        if (cache_fill_write(f, body, blen) != CACHE_OK) {
            cache_fill_abort(f);
            continue;
        }
        if (cache_fill_commit(f, NULL) == CACHE_OK)
            stored++;
        if (i % 4096 == 4095)
            cache_manager_tick(c);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (cache_mark_clean_shutdown(c) != CACHE_OK) {
        fprintf(stderr, "bench-restart-fill: could not mark the store clean\n");
        return 1;
    }
    cache_close(c);
    printf("stored %lu of %lu objects (%lu-byte bodies) in %.2f s\n", stored, count, blen,
           (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    return stored == count ? 0 : 1;
}
