/*
 * plugins/generator.c: generator.so, a synthetic origin (ATS's generator
 * plugin, for Cistern): an intercept that answers
 *
 *   /cache/SIZE/ID     200, SIZE bytes, Cache-Control: public, max-age=86400
 *   /nocache/SIZE/ID   200, SIZE bytes, Cache-Control: private, no-store
 *   anything else      404
 *
 * on the rule it is named on (`map http://gen.test/ http://127.0.0.1/
 * @plugin=generator.so`).  SIZE is bytes, with an optional K/M/G suffix
 * (powers of 1024).  Its answers go through the cache like an origin's, so
 * a /cache/ URL asked twice is a plain cache hit the second time.  The
 * body is made in pieces as the worker can send it; nothing is allocated
 * per request.
 *
 * Arguments (@pparam=): max-size=BYTES (default 1G; larger asks get 400),
 * debug-crash (for the fault-isolation test: a /crash/ URL dereferences a
 * null pointer in the worker).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

struct gen {
    const struct cst_api *api;
    uint64_t max;
    int crash;
};

/* SIZE[K|M|G] into *out: 0, or -1 when it is not one or is past
 * INT64_MAX (intercept_answer's length is signed; a suffix that shifted
 * the bits out made 17179869185G 1 GiB). */
static int
gen_size(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    int shift = 0;

    if (n == 0)
        return -1;
    for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > UINT64_MAX / 10 - 10)
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return -1;
    if (i + 1 == n) {
        switch (s[i]) {
        case 'k': case 'K': shift = 10; break;
        case 'm': case 'M': shift = 20; break;
        case 'g': case 'G': shift = 30; break;
        default: return -1;
        }
    } else if (i != n) {
        return -1;
    }
    if (v > (uint64_t)INT64_MAX >> shift)
        return -1;
    *out = v << shift;
    return 0;
}

static void *
gen_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct gen *g = calloc(1, sizeof(*g));

    if (g == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    g->api = api;
    g->max = 1ULL << 30;
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "max-size=", 9) == 0
            && gen_size(argv[i] + 9, strlen(argv[i] + 9), &g->max) == 0)
            continue;
        if (strcmp(argv[i], "debug-crash") == 0) {
            g->crash = 1;
            continue;
        }
        snprintf(err, errlen, "unknown argument \"%s\" (expected max-size=BYTES or "
                 "debug-crash)", argv[i]);
        free(g);
        return NULL;
    }
    return g;
}

static void
gen_destroy(void *inst)
{
    free(inst);
}

static ssize_t
gen_body(void *arg, uint64_t off, char *buf, size_t cap)
{
    /* (cap is bounded by the length: the caller's) */
    if (arg != NULL)
        memcpy(buf, (const char *)arg + off, cap);
    else
        memset(buf, 'x', cap);
    return (ssize_t)cap;
}

static int
gen_intercept(void *inst, struct cst_txn *t)
{
    struct gen *g = inst;
    const struct cst_api *api = g->api;
    struct cst_url u;
    const char *p, *slash, *end;
    uint64_t size;
    int cache;

    api->url_get(t, &u);
    p = u.path;
    end = u.path + u.pathlen;
    if ((slash = memchr(p, '?', u.pathlen)) != NULL)
        end = slash;
    if (g->crash && end - p >= 7 && memcmp(p, "/crash/", 7) == 0) {
        volatile int *nowhere = NULL;
        *nowhere = 1;           /* debug-crash: the worker dies here */
    }
    if (end - p > 7 && memcmp(p, "/cache/", 7) == 0) {
        cache = 1;
        p += 7;
    } else if (end - p > 9 && memcmp(p, "/nocache/", 9) == 0) {
        cache = 0;
        p += 9;
    } else {
        goto notfound;
    }
    slash = memchr(p, '/', (size_t)(end - p));
    if (slash == NULL || gen_size(p, (size_t)(slash - p), &size) < 0)
        goto notfound;
    if (size > g->max) {
        static const char msg[] = "generator: size over max-size\n";
        api->field_add(t, CST_RESPONSE, "Content-Type", 12, "text/plain", 10);
        api->field_add(t, CST_RESPONSE, "Cache-Control", 13, "no-store", 8);
        return api->intercept_answer(t, 400, sizeof(msg) - 1, gen_body, (void *)msg,
                                     NULL) == 0;
    }
    api->field_add(t, CST_RESPONSE, "Content-Type", 12, "application/octet-stream", 24);
    if (cache)
        api->field_add(t, CST_RESPONSE, "Cache-Control", 13, "public, max-age=86400", 21);
    else
        api->field_add(t, CST_RESPONSE, "Cache-Control", 13, "private, no-store", 17);
    return api->intercept_answer(t, 200, (int64_t)size, gen_body, NULL, NULL) == 0;
notfound:
    api->field_add(t, CST_RESPONSE, "Cache-Control", 13, "no-store", 8);
    return api->intercept_answer(t, 404, 0, gen_body, NULL, NULL) == 0;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "generator",
    .create = gen_create,
    .destroy = gen_destroy,
    .intercept = gen_intercept,
};
