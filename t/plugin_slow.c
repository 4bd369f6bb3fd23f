/*
 * t/plugin_slow.c: slow.so, a test-only plugin for t/test_plugins.py (the
 * test compiles it): a deferred intercept.  Its intercept takes every
 * request of its rule and answers later, from timers of the worker:
 *
 *   head-ms=N     the head comes N ms after the request (intercept says
 *                 CST_AGAIN; a timer calls intercept_resume)
 *   steps=N       the body comes in N pieces ...
 *   step-ms=N     ... one every N ms (the producer says CST_AGAIN between)
 *   chunk=N       of N bytes each, piece i all the letter 'a' + i
 *   length=close  no Content-Length: the body ends with the connection
 *   fail          when called again, the intercept does not answer (502)
 *
 * The answer is cacheable (max-age=60).  Each intercept's end (its done)
 * is logged: "slow: done /PATH after B body bytes".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cistern/plugin.h"

struct slow {
    const struct cst_api *api;
    int head_ms, steps, step_ms, chunk, close_len, fail;
};

struct slow_txn {
    struct slow       *s;
    struct cst_icpt   *h;
    struct cst_timer  *tm;
    int                head_ready;
    int                piece;       /* pieces made so far */
    int                avail;       /* bytes of the current piece not yet given */
    unsigned long long given;
    char               path[128];
};

static void *
slow_create(const struct cst_api *api, int argc, char **argv, char *err, size_t errlen)
{
    struct slow *s;

    if (api->size < sizeof(*api)) {
        snprintf(err, errlen, "this daemon's API has no deferred intercepts");
        return NULL;
    }
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return NULL;
    s->api = api;
    s->head_ms = 100;
    s->steps = 3;
    s->step_ms = 100;
    s->chunk = 100;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "head-ms=", 8) == 0)
            s->head_ms = atoi(a + 8);
        else if (strncmp(a, "steps=", 6) == 0)
            s->steps = atoi(a + 6);
        else if (strncmp(a, "step-ms=", 8) == 0)
            s->step_ms = atoi(a + 8);
        else if (strncmp(a, "chunk=", 6) == 0)
            s->chunk = atoi(a + 6);
        else if (strcmp(a, "length=close") == 0)
            s->close_len = 1;
        else if (strcmp(a, "fail") == 0)
            s->fail = 1;
        else {
            snprintf(err, errlen, "unknown argument \"%s\"", a);
            free(s);
            return NULL;
        }
    }
    if (s->steps < 1 || s->steps > 26 || s->chunk < 1 || s->chunk > 1000000) {
        snprintf(err, errlen, "steps 1..26, chunk 1..1000000");
        free(s);
        return NULL;
    }
    return s;
}

static void
slow_destroy(void *inst)
{
    free(inst);
}

static void
slow_resume(void *arg)
{
    struct slow_txn *x = arg;

    x->tm = NULL;
    if (!x->head_ready)
        x->head_ready = 1;
    else {
        x->piece++;
        x->avail = x->s->chunk;
    }
    x->s->api->intercept_resume(x->h);
}

static void
slow_done(void *arg)
{
    struct slow_txn *x = arg;

    if (x->tm != NULL)
        x->s->api->timer_cancel(x->tm);
    x->s->api->log(NULL, CST_LOG_INFO, "slow: done %s after %llu body bytes", x->path,
                   x->given);
    free(x);
}

static ssize_t
slow_produce(void *arg, uint64_t off, char *buf, size_t cap)
{
    struct slow_txn *x = arg;
    size_t n;

    (void)off;
    if (x->avail == 0) {
        if (x->piece == x->s->steps)
            return 0;
        if (x->tm == NULL)
            x->tm = x->s->api->timer_add(x->s->step_ms, slow_resume, x);
        return x->tm ? CST_AGAIN : -1;
    }
    n = (size_t)x->avail < cap ? (size_t)x->avail : cap;
    memset(buf, 'a' + x->piece - 1, n);
    x->avail -= (int)n;
    x->given += n;
    return (ssize_t)n;
}

static int
slow_intercept(void *inst, struct cst_txn *t)
{
    struct slow *s = inst;
    const struct cst_api *api = s->api;
    void **slot = api->slot(t);
    struct slow_txn *x = *slot;
    struct cst_url u;

    if (x == NULL) {
        /* the first call: take the request, answer once the timer says */
        if ((x = calloc(1, sizeof(*x))) == NULL)
            return 0;
        x->s = s;
        api->url_get(t, &u);
        snprintf(x->path, sizeof(x->path), "%.*s", (int)u.pathlen, u.path);
        x->h = api->intercept_handle(t, slow_done, x);
        if (x->h == NULL) {
            free(x);
            return 0;
        }
        *slot = x;
        x->tm = api->timer_add(s->head_ms, slow_resume, x);
        return CST_AGAIN;
    }
    if (s->fail)
        return 0;
    api->field_add(t, CST_RESPONSE, "Cache-Control", 13, "max-age=60", 10);
    api->field_add(t, CST_RESPONSE, "Content-Type", 12, "text/plain", 10);
    api->intercept_answer(t, 200, s->close_len ? -1 : (int64_t)s->steps * s->chunk,
                          slow_produce, x, NULL);
    return 1;
}

CST_PLUGIN_EXPORT const struct cst_plugin cistern_plugin = {
    .abi = CST_PLUGIN_ABI,
    .name = "slow",
    .create = slow_create,
    .destroy = slow_destroy,
    .intercept = slow_intercept,
};
