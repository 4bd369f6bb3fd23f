/*
 * worker/metrics.c: what a request adds to the metrics of issue 25, and
 * the names of the per-rule and per-origin series.
 *
 * At DONE (req.c) a request adds, to its worker's own slot counters in
 * shm (plain increments: one writer per slot, as every counter there):
 *   - three latency histograms by cache result (hit / miss / other):
 *     total (the steps' start, with the head read and parsed, to DONE),
 *     time to first byte (to the answer's head being made: resp_count)
 *     and, for a request that went
 *     to an origin, origin time (the transaction's start to the origin's
 *     response head);
 *   - its remap rule's requests, hits, misses, bytes sent and errors
 *     (a 5xx, or an answer cut short).
 * A request with a cache key counts in the worker's busiest-URL table
 * (shm/urltop.h) at LOOKUP (metrics_url: the head is there to label a new
 * entry), and its hit or miss at DONE, unless another key took the entry
 * meanwhile.
 * Origin hosts count requests and errors where the counters of every
 * origin do (proxy.c), and connect time when a new connection is up
 * (origin.c).
 *
 * Cost on a hit: three clock_gettime() (vDSO, no system call), a bucket
 * search over 14 bounds, and seven increments in a slot already in cache.
 * No allocation, no lock, no atomic.
 *
 * Names (shm/labeltab.h): a rule is its @name= or "file:line" (the file's
 * base name); an origin is "host:port".  A worker resolves its rules once
 * at start (metrics_init) into a local array indexed like the config's
 * rules; an origin on first use in the process (a scan of at most
 * SHM_OHOSTS names, then a worker-local table by host and port).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shm/labeltab.h"
#include "worker/worker.h"

static int16_t *rule_idx;           /* [conf->remap.nrules] */
static int      rule_n;

void
metrics_init(struct worker *w)
{
    const struct conf_remap *rm = &w->conf->remap;

    free(rule_idx);
    rule_n = 0;
    rule_idx = rm->nrules > 0 ? calloc((size_t)rm->nrules, sizeof(*rule_idx)) : NULL;
    if (rule_idx == NULL)
        return;     /* every rule counts as "other" */
    rule_n = rm->nrules;
    for (int i = 0; i < rm->nrules; i++) {
        const struct conf_remap_rule *r = &rm->rules[i];
        char name[LT_NAME];

        if (r->name) {
            snprintf(name, sizeof(name), "%.64s", r->name);
        } else {
            const char *f = r->file ? strrchr(r->file, '/') : NULL;
            snprintf(name, sizeof(name), "%s:%d", f ? f + 1 : r->file ? r->file : "remap.config",
                     r->line);
        }
        rule_idx[i] = (int16_t)labeltab_find(w->shm->labeltab, LT_RULE, name);
    }
}

void
metrics_route(struct req *rq, const struct conf_remap_rule *rule)
{
    long i;

    if (rule == NULL || rule_n == 0) {
        rq->rq_rule = -1;
        return;
    }
    i = rule - wk->conf->remap.rules;
    rq->rq_rule = i >= 0 && i < rule_n ? rule_idx[i] : 0;
}

/* A worker's memory of the origin names it has resolved: a direct-mapped
 * table by host and port.  Label indexes never change (labeltab.h), so an
 * entry stays true for the life of the process; a collision only costs
 * the next request one labeltab scan. */
#define OH_CACHE 32
static struct {
    int  port;
    int  idx1;          /* label index + 1; 0: an empty entry */
    char host[80];
} oh_cache[OH_CACHE], *oh_last;

static unsigned
oh_slot(const char *host, size_t n, int port)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)host[i]) * 16777619u;
    h ^= (uint32_t)port * 2654435761u;
    return (h ^ h >> 15) % OH_CACHE;
}

int
metrics_ohost(const char *host, int port)
{
    char name[LT_NAME];
    size_t n;
    unsigned k = 0;
    int i, keep;

    if (oh_last && oh_last->port == port && strcmp(oh_last->host, host) == 0)
        return oh_last->idx1 - 1;       /* the origin of the request before */
    n = strlen(host);
    keep = n < sizeof(oh_cache[0].host);
    if (keep) {
        k = oh_slot(host, n, port);
        if (oh_cache[k].idx1 && oh_cache[k].port == port
            && memcmp(oh_cache[k].host, host, n + 1) == 0) {
            oh_last = &oh_cache[k];
            return oh_cache[k].idx1 - 1;
        }
    }
    snprintf(name, sizeof(name), "%.64s:%d", host, port);
    i = labeltab_find(wk->shm->labeltab, LT_OHOST, name);
    if (keep) {
        memcpy(oh_cache[k].host, host, n + 1);
        oh_cache[k].port = port;
        oh_cache[k].idx1 = i + 1;
        oh_last = &oh_cache[k];
    }
    return i;
}

int64_t
metrics_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static uint64_t
us_since(int64_t from, int64_t to)
{
    return to > from ? (uint64_t)(to - from) : 0;
}

static void
metrics_lat(struct shm_counters *c, int kind, int res, uint64_t us)
{
    c->lat[kind][res][shm_lat_bucket(us)]++;
    c->lat_sum_us[kind][res] += us;
}

/* hit, miss or other, from the result the access log writes.  Every
 * TCP_ result names its class last (TCP_HIT, TCP_IMS_HIT, TCP_REFRESH_HIT,
 * TCP_REFRESH_FAIL_HIT; TCP_MISS, TCP_REFRESH_MISS; TCP_DENIED,
 * TCP_TUNNEL), so the tail decides (no strstr on every request). */
static int
metrics_res(const struct req *rq)
{
    const char *r = rq->rq_result;
    size_t n;

    if (r == NULL || r[0] != 'T' || rq->r.method == HTTP_PURGE || rq->r.method == HTTP_M_PUSH)
        return SHM_RES_OTHER;
    n = strlen(r);
    if (n > 4 && memcmp(r + n - 4, "_HIT", 4) == 0)
        return SHM_RES_HIT;
    if (n > 5 && memcmp(r + n - 5, "_MISS", 5) == 0)
        return SHM_RES_MISS;
    return SHM_RES_OTHER;
}

void
metrics_done(struct req *rq)
{
    struct shm_counters *c = wk->ctr;
    int64_t now;
    int res;

    if (rq->rq_bg || rq->rq_t0 == 0)
        return;     /* a background revalidation; a request never begun */
    now = metrics_now();
    res = metrics_res(rq);
    metrics_lat(c, SHM_LAT_TOTAL, res, us_since(rq->rq_t0, now));
    metrics_lat(c, SHM_LAT_TTFB, res, us_since(rq->rq_t0, rq->rq_ttfb ? rq->rq_ttfb : now));
    if (rq->rq_ostart && rq->rq_ttfb)
        metrics_lat(c, SHM_LAT_ORIGIN, res, us_since(rq->rq_ostart, rq->rq_ttfb));
    if (rq->rq_rule >= 0) {
        uint64_t *rc = c->rule[rq->rq_rule];
        rc[SHM_RULE_REQ]++;
        rc[SHM_RULE_HIT] += res == SHM_RES_HIT;
        rc[SHM_RULE_MISS] += res == SHM_RES_MISS;
        rc[SHM_RULE_BYTES] += rq->rq_sent;
        rc[SHM_RULE_ERR] += rq->counted >= 500 || rq->rq_abort;
    }
    if (rq->rq_topkey && rq->rq_topent->hash == rq->rq_topkey) {
        rq->rq_topent->hits += res == SHM_RES_HIT;
        rq->rq_topent->misses += res == SHM_RES_MISS;
    }
    rq->rq_t0 = 0;      /* counted once */
}

void
metrics_url(struct req *rq, const uint8_t hash[16])
{
    uint64_t k = urltop_key(hash);
    int taken;
    struct urltop_ent *e = urltop_count(wk->urls, k, &taken);

    if (taken)
        urltop_take(e, k, rq->r.base + rq->r.host, rq->r.host_len, rq->r.base + rq->r.path,
                    rq->r.path_len);
    rq->rq_topkey = k;
    rq->rq_topent = e;
}

void
metrics_ohost_count(struct upstream *up, int what)
{
    if (up->up_oh1 == 0)
        up->up_oh1 = metrics_ohost(up->up_host, up->up_port) + 1;
    wk->ctr->ohost[up->up_oh1 - 1][what]++;
}

void
metrics_connected(struct upstream *up)
{
    int i;

    if (up->up_cstart == 0)
        return;
    i = metrics_ohost(up->up_host, up->up_port);
    wk->ctr->ohost[i][SHM_OH_CONNECTS]++;
    wk->ctr->ohost[i][SHM_OH_CONNECT_US] += us_since(up->up_cstart, metrics_now());
    up->up_cstart = 0;
}
