/*
 * worker/purge.c: purges by tag, prefix, host and everything (issue 23):
 * the query of POST /_purge, the run (cache/purge.c does the work) and its
 * counters, the JSON answer.
 *
 *   POST /_purge?tag=T[&tag=U...][&soft=1]
 *   POST /_purge?prefix=URL[&prefix=URL2...][&soft=1]
 *   POST /_purge?host=HOST[&host=H2...][&soft=1]
 *   POST /_purge?all=1[&soft=1]
 *   -> 200 {"purged": N, "soft": false}
 *
 * req.c answers the path (the ACL is ip_allow's PURGE method, like PURGE
 * itself) and maps each prefix and host through remap.config as a GET of
 * that URL would be, then calls purge_run.  cistern ctl's grouped forms
 * (worker/ctl.c -> req.c) come here the same way.  N is what
 * cache_purge() counts: the stored objects removed or marked stale (a Vary
 * response's marker is not counted, its variants are).  The answer is
 * written only after the purge's txn committed and was synced, so every
 * worker's next lookup misses (or revalidates) and a kill -9 after the
 * answer keeps it.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "shm/log.h"
#include "worker/worker.h"

int
purge_is_path(const struct http_req *r)
{
    const char *p = r->base + r->path;

    return r->path_len >= 7 && memcmp(p, "/_purge", 7) == 0
           && (r->path_len == 7 || p[7] == '?');
}

static int
purge_hex(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

/* Percent-decode (and '+' as a space) s[0..n) into pa's buffer. */
static const char *
purge_decode(struct purge_ask *pa, const char *s, size_t n, size_t *outlen)
{
    char *o = pa->buf + pa->used, *start = o;

    for (size_t i = 0; i < n; i++) {
        if (pa->used + (size_t)(o - start) + 1 >= sizeof(pa->buf))
            return NULL;
        if (s[i] == '%' && i + 2 < n && purge_hex(s[i + 1]) >= 0 && purge_hex(s[i + 2]) >= 0) {
            *o++ = (char)(purge_hex(s[i + 1]) * 16 + purge_hex(s[i + 2]));
            i += 2;
        } else {
            *o++ = s[i] == '+' ? ' ' : s[i];
        }
    }
    *o++ = '\0';
    *outlen = (size_t)(o - start) - 1;
    pa->used += (size_t)(o - start);
    return start;
}

/*
 * See worker.h.  Exactly one kind per request; tag, prefix and host may
 * repeat (at most PURGE_ARGS_MAX), all=1 takes no other; soft=1 or 0.
 */
const char *
purge_parse_query(const char *q, size_t n, struct purge_ask *pa)
{
    static const struct { const char *name; int kind; } kinds[] = {
        { "tag", SHM_PURGE_TAG }, { "prefix", SHM_PURGE_PREFIX },
        { "host", SHM_PURGE_HOST }, { "all", SHM_PURGE_ALL },
    };
    const char *p = q, *end = q + n;

    memset(pa, 0, sizeof(*pa));
    pa->kind = -1;
    while (p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p)), *pe = amp ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(pe - p));
        size_t nl = eq ? (size_t)(eq - p) : (size_t)(pe - p), vl = 0;
        const char *v = eq ? purge_decode(pa, eq + 1, (size_t)(pe - eq - 1), &vl) : NULL;
        int kind = -1;

        if (eq && v == NULL)
            return "the query is too long";
        if (nl == 4 && memcmp(p, "soft", 4) == 0) {
            if (v == NULL || (strcmp(v, "1") != 0 && strcmp(v, "0") != 0))
                return "soft takes 1 or 0";
            pa->soft = v[0] == '1';
        } else if (nl > 0) {
            for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
                if (strlen(kinds[k].name) == nl && memcmp(p, kinds[k].name, nl) == 0)
                    kind = kinds[k].kind;
            if (kind < 0)
                return "unknown parameter (tag, prefix, host, all, soft)";
            if (pa->kind >= 0 && pa->kind != kind)
                return "one kind of purge per request";
            pa->kind = kind;
            if (kind == SHM_PURGE_ALL) {
                if (v == NULL || strcmp(v, "1") != 0)
                    return "all takes 1";
            } else if (v == NULL || vl == 0) {
                return "an empty value";
            } else if (pa->nargs == PURGE_ARGS_MAX) {
                return "too many values";
            } else {
                pa->arg[pa->nargs] = v;
                pa->len[pa->nargs++] = vl;
            }
        }
        p = pe + 1;
    }
    if (pa->kind < 0)
        return "say what to purge: tag=, prefix=, host= or all=1";
    return NULL;
}

/* A soft purge of a URL key holding a Vary marker: the marker is no
 * object (skipped), its current variants (their secondary keys start
 * with the prefix store_variants_prefix gives) are marked.  Uncounted. */
static int64_t
purge_soft_prefix(const char *prefix, size_t len)
{
    struct cache_purge_req pr;
    const char *arg[1] = { prefix };
    size_t alen[1] = { len };

    memset(&pr, 0, sizeof(pr));
    pr.kind = CACHE_PURGE_PREFIX;
    pr.arg = arg;
    pr.len = alen;
    pr.nargs = 1;
    pr.soft = 1;
    pr.now = (int64_t)time(NULL);
    pr.skip_flags = STORE_F_VARY_MARKER;
    return cache_purge(wk->cache, &pr);
}

/*
 * See worker.h.
 */
int64_t
purge_run(int kind, const char *const *arg, const size_t *len, int nargs, int soft)
{
    struct cache_purge_req pr;
    int64_t n;

    if (wk->cache == NULL)
        return CACHE_ERROR;
    memset(&pr, 0, sizeof(pr));
    pr.kind = kind == SHM_PURGE_URL ? CACHE_PURGE_KEY
            : kind == SHM_PURGE_TAG ? CACHE_PURGE_TAG
            : kind == SHM_PURGE_ALL ? CACHE_PURGE_ALL : CACHE_PURGE_PREFIX;
    pr.arg = arg;
    pr.len = len;
    pr.nargs = nargs;
    pr.soft = soft;
    pr.now = (int64_t)time(NULL);
    pr.skip_flags = STORE_F_VARY_MARKER;
    if (nargs == 0 && kind != SHM_PURGE_ALL)
        n = 0;      /* nothing mapped: nothing to purge */
    else
        n = cache_purge(wk->cache, &pr);
    for (int i = 0; kind == SHM_PURGE_URL && soft && i < nargs && n >= 0; i++) {
        static char vpre[STORE_KEY_MAX + 256];
        size_t vn = store_variants_prefix(arg[i], len[i], vpre, sizeof(vpre));
        int64_t more = vn ? purge_soft_prefix(vpre, vn) : 0;
        n = more < 0 ? more : n + more;
    }
    if (n < 0)
        return n;
    purge_count(kind, soft, (uint64_t)n);
    return n;
}

void
purge_count(int kind, int soft, uint64_t n)
{
    if (kind < 0 || kind >= SHM_PURGE_N)
        return;
    wk->ctr->purges[kind]++;
    wk->ctr->purges_soft += soft != 0;
    wk->ctr->purged_objects += n;
}

const char *
purge_kind_name(int kind)
{
    static const char *const names[] = { "url", "tag", "prefix", "host", "all" };

    return kind >= 0 && kind < SHM_PURGE_N ? names[kind] : "?";
}

/* The authority part of a key ("scheme://host[:port]/"), for a host purge.
 * Returns its length (through the slash), or 0. */
size_t
purge_key_origin(const char *key, size_t keylen)
{
    const char *a = memmem(key, keylen, "://", 3), *s;

    if (a == NULL)
        return 0;
    a += 3;
    s = memchr(a, '/', keylen - (size_t)(a - key));
    return s ? (size_t)(s - key) + 1 : 0;
}
