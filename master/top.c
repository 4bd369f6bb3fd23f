/*
 * master/top.c: `cistern ctl top`, the live view (ATS's traffic_top in
 * spirit).  Every second it asks the control socket for every metric
 * ("metric match ^proxy\.") and shows what changed over that second:
 * requests per second, hit ratio, bandwidth, latency percentiles (from the
 * histograms' buckets), origin traffic, and the busiest remap rules.
 *
 * On a terminal the screen is redrawn in place (ANSI: home, clear) until
 * q, Ctrl-C or -n FRAMES; otherwise each frame is printed as plain text
 * (`ctl top -n 1` prints one frame, a second after it starts, and exits).
 * No curses library is needed: the screen is one block of text.
 *
 * The busiest URLs come from "url top N requests" and "url top N misses"
 * (the master merges every worker's table, shm/urltop.h): counts since the
 * start, and requests per second where the previous frame had the URL.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "shm/shm.h"
#include "master/master.h"

#define TOP_MAX   4096
#define TOP_RULES 10
#define TOP_URLS  5

struct top_m {
    char   name[160];
    double v;
};

struct top_url {
    char   url[URLTOP_URL];
    double req, hits, misses;
};

struct top_snap {
    struct top_m m[TOP_MAX];
    int          n;
    double       t;           /* seconds, monotonic */
    struct top_url u[2][TOP_URLS];  /* by requests, by misses */
    int          nu[2];
};

static volatile sig_atomic_t top_stop;

static void
top_on_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

static double
top_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The rows of "url top TOP_URLS requests|misses" into s->u[by]. */
static void
top_urls(const char *sock, struct top_snap *s, int by)
{
    char *ans = NULL, *p, *e;

    s->nu[by] = 0;
    if (ctl_call_top(sock, by ? "url top 5 misses" : "url top 5 requests", &ans) != 0 || !ans) {
        free(ans);
        return;
    }
    p = strchr(ans, '\n');
    for (p = p ? p + 1 : ans; *p; p = e + 1) {
        char *t, *dot;
        int i;
        if ((e = strchr(p, '\n')) == NULL)
            break;
        *e = '\0';
        if (strncmp(p, "url.", 4) != 0 || (t = strchr(p, '\t')) == NULL)
            continue;
        *t = '\0';
        i = (int)strtol(p + 4, &dot, 10) - 1;
        if (i < 0 || i >= TOP_URLS)
            continue;
        struct top_url *u = &s->u[by][i];
        if (*dot == '\0') {
            snprintf(u->url, sizeof(u->url), "%s", t + 1);
            if (i + 1 > s->nu[by])
                s->nu[by] = i + 1;
        } else if (strcmp(dot, ".requests") == 0) {
            u->req = strtod(t + 1, NULL);
        } else if (strcmp(dot, ".hits") == 0) {
            u->hits = strtod(t + 1, NULL);
        } else if (strcmp(dot, ".misses") == 0) {
            u->misses = strtod(t + 1, NULL);
        }
    }
    free(ans);
}

static int
top_sample(const char *sock, struct top_snap *s)
{
    char *ans = NULL, *p, *e;
    int code = ctl_call_top(sock, "metric match ^proxy\\.", &ans);

    s->n = 0;
    s->t = top_now();
    if (code != 0 || ans == NULL) {
        free(ans);
        return code ? code : 4;
    }
    p = strchr(ans, '\n');
    for (p = p ? p + 1 : ans; *p && s->n < TOP_MAX; p = e + 1) {
        char *t;
        if ((e = strchr(p, '\n')) == NULL)
            break;
        *e = '\0';
        if ((t = strchr(p, '\t')) == NULL)
            continue;
        *t = '\0';
        snprintf(s->m[s->n].name, sizeof(s->m[s->n].name), "%s", p);
        s->m[s->n].v = strtod(t + 1, NULL);
        s->n++;
    }
    free(ans);
    top_urls(sock, s, 0);
    top_urls(sock, s, 1);
    return 0;
}

static double
top_get(const struct top_snap *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (strcmp(s->m[i].name, name) == 0)
            return s->m[i].v;
    return 0;
}

static double
top_delta(const struct top_snap *a, const struct top_snap *b, const char *name)
{
    double d = top_get(b, name) - top_get(a, name);

    return d > 0 ? d : 0;
}

/* The q-quantile of the total latency over the interval, from the
 * cumulative buckets of every result; -1 when no request ended. */
static double
top_quantile(const struct top_snap *a, const struct top_snap *b, double q)
{
    static const char *const res[] = { "hit", "miss", "other" };
    double cum[SHM_LAT_BUCKETS], total;
    char name[160];

    for (int k = 0; k < SHM_LAT_BUCKETS; k++) {
        cum[k] = 0;
        for (int r = 0; r < 3; r++) {
            if (k < SHM_LAT_BUCKETS - 1)
                snprintf(name, sizeof(name), "proxy.process.cistern.latency.total.%s.le_%llu",
                         res[r], (unsigned long long)shm_lat_bounds_us[k]);
            else
                snprintf(name, sizeof(name), "proxy.process.cistern.latency.total.%s.le_inf", res[r]);
            cum[k] += top_delta(a, b, name);
        }
    }
    total = cum[SHM_LAT_BUCKETS - 1];
    if (total <= 0)
        return -1;
    for (int k = 0; k < SHM_LAT_BUCKETS - 1; k++)
        if (cum[k] >= q * total) {
            /* linear within the bucket, as Prometheus' histogram_quantile */
            double lo = k ? (double)shm_lat_bounds_us[k - 1] : 0, hi = (double)shm_lat_bounds_us[k];
            double below = k ? cum[k - 1] : 0, in = cum[k] - below;
            return (lo + (in > 0 ? (q * total - below) / in : 1) * (hi - lo)) / 1000.0;
        }
    return (double)shm_lat_bounds_us[SHM_LAT_BUCKETS - 2] / 1000.0;   /* beyond the last bound */
}

static void
top_bytes(double b, char *out, size_t len)
{
    static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;

    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(out, len, "%.1f %s", b, u[i]);
}

struct top_rule {
    char   name[96];
    double req, hits, misses, bytes, errors, total;
};

static int
top_rule_cmp(const void *x, const void *y)
{
    const struct top_rule *a = x, *b = y;

    return a->req < b->req ? 1 : a->req > b->req ? -1
         : a->total < b->total ? 1 : a->total > b->total ? -1 : 0;
}

/* The rules: every proxy.process.cistern.rule.NAME.requests of b. */
static int
top_rules(const struct top_snap *a, const struct top_snap *b, struct top_rule *out, int max)
{
    static const char pre[] = "proxy.process.cistern.rule.", suf[] = ".requests";
    int n = 0;

    for (int i = 0; i < b->n && n < max; i++) {
        const char *nm = b->m[i].name;
        size_t l = strlen(nm);
        char base[200];
        if (strncmp(nm, pre, sizeof(pre) - 1) != 0 || l < sizeof(pre) + sizeof(suf) - 2
            || strcmp(nm + l - (sizeof(suf) - 1), suf) != 0)
            continue;
        struct top_rule *r = &out[n++];
        snprintf(r->name, sizeof(r->name), "%.*s", (int)(l - (sizeof(pre) - 1) - (sizeof(suf) - 1)),
                 nm + sizeof(pre) - 1);
        snprintf(base, sizeof(base), "%.*s", (int)(l - (sizeof(suf) - 1)), nm);
        char k[260];
#define D(field, what) (snprintf(k, sizeof(k), "%s.%s", base, what), r->field = top_delta(a, b, k))
        D(req, "requests");
        D(hits, "hits");
        D(misses, "misses");
        D(bytes, "bytes");
        D(errors, "errors");
#undef D
        r->total = b->m[i].v;
    }
    qsort(out, (size_t)n, sizeof(*out), top_rule_cmp);
    return n;
}

/* The URL rows of b (by requests or by misses), with rates where a had
 * the URL. */
static void
top_url_rows(FILE *o, const struct top_snap *a, const struct top_snap *b, int by, double dt)
{
    fprintf(o, "\n%9s %7s %10s %8s %8s  %s\n", by ? "miss/s" : "req/s", "hit%", "requests",
            "hits", "misses", by ? "URL (by misses)" : "URL (by requests)");
    for (int i = 0; i < b->nu[by]; i++) {
        const struct top_url *u = &b->u[by][i];
        double prev = -1;
        char rate[16];
        for (int k = 0; k < 2 && prev < 0; k++)
            for (int j = 0; j < a->nu[k]; j++)
                if (strcmp(a->u[k][j].url, u->url) == 0) {
                    prev = by ? a->u[k][j].misses : a->u[k][j].req;
                    break;
                }
        if (prev >= 0)
            snprintf(rate, sizeof(rate), "%.1f", ((by ? u->misses : u->req) - prev) / dt);
        else
            snprintf(rate, sizeof(rate), "-");
        fprintf(o, "%9s %6.1f%% %10.0f %8.0f %8.0f  %s\n", rate,
                u->hits + u->misses > 0 ? 100.0 * u->hits / (u->hits + u->misses) : 0.0,
                u->req, u->hits, u->misses, u->url);
    }
}

static void
top_frame(FILE *o, const struct top_snap *a, const struct top_snap *b)
{
    double dt = b->t - a->t > 0.001 ? b->t - a->t : 0.001;
    double req = top_delta(a, b, "proxy.process.http.incoming_requests");
    double hit = top_delta(a, b, "proxy.process.cistern.latency.total.hit.count");
    double miss = top_delta(a, b, "proxy.process.cistern.latency.total.miss.count");
    double hit_all = top_get(b, "proxy.process.cistern.latency.total.hit.count");
    double miss_all = top_get(b, "proxy.process.cistern.latency.total.miss.count");
    double out = top_delta(a, b, "proxy.process.cistern.client_bytes_out");
    double in = top_delta(a, b, "proxy.process.cistern.client_bytes_in");
    double p50 = top_quantile(a, b, 0.5), p90 = top_quantile(a, b, 0.9), p99 = top_quantile(a, b, 0.99);
    char bo[32], bi[32], rb[32];
    struct top_rule *rules = calloc(SHM_RULES + 8, sizeof(*rules));
    int nr = rules ? top_rules(a, b, rules, SHM_RULES + 8) : 0;
    time_t now = time(NULL);
    char ts[32];

    strftime(ts, sizeof(ts), "%H:%M:%S", localtime(&now));
    top_bytes(out / dt, bo, sizeof(bo));
    top_bytes(in / dt, bi, sizeof(bi));
    fprintf(o, "cistern top  %s  generation %.0f%s  (interval %.1f s)\n", ts,
            top_get(b, "proxy.process.cistern.generation"),
            top_get(b, "proxy.node.config.draining") > 0 ? "  DRAINING" : "", dt);
    fprintf(o, "requests/s   %10.1f     connections open  %8.0f\n", req / dt,
            top_get(b, "proxy.process.http.current_client_connections"));
    fprintf(o, "hit ratio    %9.1f%%     since start       %7.1f%%   (%.0f hits, %.0f misses)\n",
            hit + miss > 0 ? 100.0 * hit / (hit + miss) : 0.0,
            hit_all + miss_all > 0 ? 100.0 * hit_all / (hit_all + miss_all) : 0.0, hit_all, miss_all);
    fprintf(o, "bandwidth    %10s/s out   %s/s in\n", bo, bi);
    if (p50 >= 0)
        fprintf(o, "latency ms   p50 %.2f   p90 %.2f   p99 %.2f\n", p50, p90, p99);
    else
        fprintf(o, "latency ms   p50 -   p90 -   p99 -\n");
    fprintf(o, "origin       %10.1f req/s   %.0f errors/s   %.0f requests since start\n",
            top_delta(a, b, "proxy.process.http.outgoing_requests") / dt,
            top_delta(a, b, "proxy.process.cistern.origin_errors") / dt,
            top_get(b, "proxy.process.http.outgoing_requests"));
    fprintf(o, "store        %.1f%% full   %.0f objects   %.0f evictions\n",
            top_get(b, "proxy.process.cistern.store_fill_ppm") / 10000.0,
            top_get(b, "proxy.process.cache.direntries.used"),
            top_get(b, "proxy.process.cache.evictions"));
    fprintf(o, "\n%-24s %9s %7s %11s %7s %12s\n", "RULE", "req/s", "hit%", "bytes/s", "err/s", "requests");
    for (int i = 0; i < nr && i < TOP_RULES; i++) {
        const struct top_rule *r = &rules[i];
        if (r->total == 0)
            continue;
        top_bytes(r->bytes / dt, rb, sizeof(rb));
        fprintf(o, "%-24.24s %9.1f %6.1f%% %11s %7.1f %12.0f\n", r->name, r->req / dt,
                r->hits + r->misses > 0 ? 100.0 * r->hits / (r->hits + r->misses) : 0.0, rb,
                r->errors / dt, r->total);
    }
    free(rules);
    top_url_rows(o, a, b, 0, dt);
    top_url_rows(o, a, b, 1, dt);
}

int
ctl_top(const char *sock, int frames)
{
    static struct top_snap s[2];
    int tty = isatty(STDOUT_FILENO), cur = 0, rc, shown = 0;
    struct termios old, raw;
    int raw_set = 0;

    signal(SIGINT, top_on_signal);
    signal(SIGTERM, top_on_signal);
    if ((rc = top_sample(sock, &s[cur])) != 0)
        return rc;
    if (tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &old) == 0) {
        raw = old;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw_set = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    while (!top_stop && (frames < 0 || shown < frames)) {
        struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
        double until = s[cur].t + 1.0;
        while (!top_stop && top_now() < until) {
            int ms = (int)((until - top_now()) * 1000) + 1;
            if (raw_set && poll(&p, 1, ms) > 0) {
                char ch;
                if (read(STDIN_FILENO, &ch, 1) == 1 && (ch == 'q' || ch == 'Q'))
                    top_stop = 1;
            } else if (!raw_set) {
                poll(NULL, 0, ms);
            }
        }
        if (top_stop)
            break;
        if ((rc = top_sample(sock, &s[!cur])) != 0)
            break;
        if (tty)
            fputs("\033[H\033[2J", stdout);
        else if (shown)
            fputs("\n", stdout);
        top_frame(stdout, &s[cur], &s[!cur]);
        fflush(stdout);
        cur = !cur;
        shown++;
    }
    if (raw_set)
        tcsetattr(STDIN_FILENO, TCSANOW, &old);
    return rc;
}
